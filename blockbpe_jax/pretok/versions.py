"""The Unicode version of the installed references against our tables' (unicode.py).

Each table group is generated at the version of the reference it must equal, and checked
against one release of it (the `references` of its meta: tiktoken 0.14.0, tokenizers 0.23.3).
When a tokenizer is loaded and the reference it must equal is installed at another release,
that release is probed (a few code points new in each Unicode version, the tables'
fingerprints) and, where its Unicode version differs from the table's, a UnicodeVersionWarning
names both: never a silent difference. The references are probed only then; nothing is
imported when they are absent or at the checked release.
"""

from __future__ import annotations

import functools
import importlib.metadata
import warnings

from . import unicode as uni

# Which table groups each reference's behaviour depends on.
GROUPS = {"tiktoken": ("regex",), "tokenizers": ("regex", "nfc", "lowercase")}
_WHAT = {
    "regex": "regex engine's character classes",
    "nfc": "NFC normalizer",
    "lowercase": "Lowercase normalizer",
}


class UnicodeVersionWarning(UserWarning):
    """An installed reference uses another Unicode version than our tables for it."""


def installed_version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _newest_known(versions, rows, known) -> str | None:
    """The newest version all of whose fingerprint rows `known` accepts; None if not even the
    oldest's."""
    best = None
    for v, version in enumerate(versions):
        mine = [r for r in rows if r[0] == v]
        if mine and all(known(r) for r in mine):
            best = str(version)
    return best


def probe(package: str, group: str) -> str | None:
    """The Unicode version the installed `package` ("tiktoken" or "tokenizers") shows for a
    table group ("regex", "nfc", "lowercase"), from the fingerprints; None: older than all."""
    d = uni._table(group)
    versions = [str(v) for v in d["fp_versions"]]
    if group == "regex":
        rows = d["fp_assigned"].tolist()
        text = "\x00".join(chr(c) for _, c in rows)
        got = assigned_in(package, text)
        return _newest_known(versions, rows, lambda r: r[1] in got)
    if package != "tokenizers":
        raise ValueError(f"{package} has no {group} normalizer")
    from tokenizers import normalizers

    if group == "nfc":
        marks, pairs = d["fp_marks"].tolist(), d["fp_pairs"].tolist()
        probes = ["a" + chr(m) + "\u0334" for _, m in marks] + [chr(a) + chr(b) for _, a, b in pairs]
        out = normalizers.NFC().normalize_str("\x00".join(probes)).split("\x00")
        ok = [o != p for o, p in zip(out, probes)]  # reordered / composed
        rows = [("m", v, k) for k, (v, _) in enumerate(marks)]
        rows += [("p", v, len(marks) + k) for k, (v, _, _) in enumerate(pairs)]
        return _newest_known(versions, [(v, k) for _, v, k in rows], lambda r: ok[r[1]])
    rows = d["fp_upper"].tolist()
    out = normalizers.Lowercase().normalize_str("\x00".join(chr(c) for _, c in rows)).split("\x00")
    changed = {c for (_, c), o in zip(rows, out) if o != chr(c)}
    return _newest_known(versions, rows, lambda r: r[1] in changed)


@functools.lru_cache(maxsize=None)
def _tiktoken_assigned_probe():
    """A tiktoken Encoding whose pieces are the code points its regex engine calls assigned."""
    import tiktoken

    return tiktoken.Encoding(
        "unicode_probe",
        pat_str=r"\P{Cn}",
        mergeable_ranks={bytes([i]): i for i in range(256)},
        special_tokens={},
    )


def assigned_in(package: str, text: str) -> set[int]:
    """The code points of `text` that `package`'s regex engine ("tiktoken" or "tokenizers")
    calls assigned (\\P{Cn})."""
    if package == "tiktoken":
        return set(map(ord, bytes(_tiktoken_assigned_probe().encode_ordinary(text)).decode("utf-8")))
    from tokenizers import Regex, pre_tokenizers

    removed = pre_tokenizers.Split(Regex(r"\P{Cn}"), "removed").pre_tokenize_str(text)
    gaps = {ord(ch) for piece, _ in removed for ch in piece}
    return {ord(ch) for ch in text} - gaps


@functools.lru_cache(maxsize=None)
def check_reference(package: str, group: str) -> str | None:
    """Warn (once per process) if the installed `package` is a release our `group` table was
    not checked against and its Unicode version there differs from the table's. Returns the
    warning's text, or None."""
    release = installed_version(package)
    meta = uni.table_meta(group)
    checked = meta["references"].get(package)
    if release is None or release == checked:
        return None
    try:
        theirs = probe(package, group)
    except Exception as e:  # pragma: no cover - a reference too different to probe
        theirs = f"unknown ({type(e).__name__}: {e})"
    ours = meta["unicode"]
    if theirs == ours:
        return None
    shown = theirs if theirs is not None else f"older than {uni._table(group)['fp_versions'][0]}"
    message = (
        f"{package} {release}'s {_WHAT[group]} is Unicode {shown}; blockbpe_jax's {group} tables "
        f"are Unicode {ours} (checked against {package} {checked}): text with code points whose "
        f"properties differ between those versions may be tokenized differently from {package}"
    )
    warnings.warn(message, UnicodeVersionWarning, stacklevel=3)
    return message


def check_references(package: str, groups=None) -> list[str]:
    """check_reference for each of `groups` (default: every group the package depends on)."""
    out = []
    for group in groups or GROUPS[package]:
        message = check_reference(package, group)
        if message:
            out.append(message)
    return out
