"""Where the shared test data (vocabularies and corpora) lives, for tests, benchmarks, examples.

Order: the BLOCKBPE_DATA environment variable if set (and then only it), else
``<repo root>/../shared/data`` (for an editable install), else ``<cwd>/../shared/data``, else None. The data is never copied into the repo.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "BLOCKBPE_DATA"


def find_data_dir() -> Path | None:
    """The shared data directory (holding vocab/ and corpus/), or None when it is absent.

    A BLOCKBPE_DATA that does not name a directory gives None rather than a silent fallback,
    so a typo is noticed (tests skip and say so)."""
    configured = os.environ.get(ENV_VAR)
    if configured:
        path = Path(configured).expanduser()
        return path if path.is_dir() else None
    repo_root = Path(__file__).resolve().parent.parent
    for candidate in (repo_root.parent / "shared" / "data", Path.cwd().parent / "shared" / "data"):
        if candidate.is_dir():
            return candidate
    return None
