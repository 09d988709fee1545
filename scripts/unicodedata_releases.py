"""unicodedata2 at a given Unicode version, for scripts/gen_unicode_data.py: the installed one,
a wheel, or an sdist built here (old ones with two one-line fixes for Python 3.11), fetched
with pip into a cache directory, and its data dumped by a subprocess."""

from __future__ import annotations

import glob
import os
import pathlib
import subprocess
import sys

import numpy as np


_DUMP = r"""
import sys, numpy as np, unicodedata2 as u
want, out, names = sys.argv[1], sys.argv[2], sys.argv[3].split()
assert u.unidata_version == want, (u.unidata_version, want)
index = {n: i for i, n in enumerate(names)}
gc = np.zeros(0x110000, np.uint8)
ccc = np.zeros(0x110000, np.uint8)
qc = np.zeros(0x110000, np.uint8)
trail = np.zeros(0x110000, bool)
pairs = []
decomp = []  # (code point, its full canonical decomposition, -1 padded): NFD of it alone
for cp in range(0x110000):
    ch = chr(cp)
    gc[cp] = index[u.category(ch)]
    if 0xD800 <= cp < 0xE000:
        continue
    ccc[cp] = u.combining(ch)
    if u.normalize("NFC", ch) != ch:
        qc[cp] = 2
    d = u.decomposition(ch)
    if d and not d.startswith("<"):
        nfd = u.normalize("NFD", ch)
        assert len(nfd) <= 4, (cp, nfd)
        decomp.append([cp] + [ord(x) for x in nfd] + [-1] * (4 - len(nfd)))
        parts = [int(x, 16) for x in d.split()]
        if len(parts) == 2 and u.normalize("NFC", "".join(map(chr, parts))) == ch:
            qc[parts[1]] = max(qc[parts[1]], 1)
            pairs.append(parts + [cp])
for cp in range(0x110000):
    if not 0xD800 <= cp < 0xE000 and ccc[cp] == 0:
        nfd = u.normalize("NFD", chr(cp))
        trail[cp] = len(nfd) > 1 and u.combining(nfd[-1]) != 0
qc[0x1161:0x1176] = 1  # Hangul V jamo compose with a preceding L or LV syllable
qc[0x11A8:0x11C3] = 1  # Hangul T jamo with a preceding LV syllable
pairs = np.array(sorted(pairs), np.int32).reshape(-1, 3)
np.savez(out, gc=gc, ccc=ccc, nfc_qc=qc, nfc_trail=trail, nfc_pairs=pairs[:, :2],
         nfc_composites=pairs[:, 2], nfc_decomp=np.array(decomp, np.int32).reshape(-1, 5))
"""


def _unicodedata2_dir(version: str, spec: str, cache: pathlib.Path) -> str | None:
    """A directory to put first on PYTHONPATH for unicodedata2 at `version` (None: the installed
    one is that version)."""
    try:
        import unicodedata2

        if unicodedata2.unidata_version == version:
            return None
    except ImportError:
        pass
    target = cache / f"unicodedata2-{version}"
    if glob.glob(str(target / "unicodedata2*.so")):
        return str(target)
    dl = cache / f"dl-{version}"
    spec = f"unicodedata2=={spec}"
    pip = [sys.executable, "-m", "pip"]
    r = subprocess.run(
        pip + ["download", "-q", "--no-deps", "--only-binary", ":all:", "-d", str(dl), spec],
        stderr=subprocess.DEVNULL,
    )
    wheels = glob.glob(str(dl / "*.whl"))
    if r.returncode == 0 and wheels:
        subprocess.run(pip + ["install", "-q", "--no-deps", "--target", str(target), wheels[0]], check=True)
        return str(target)
    subprocess.run(
        pip + ["download", "-q", "--no-deps", "--no-binary", ":all:", "-d", str(dl), spec], check=True
    )
    (sdist,) = glob.glob(str(dl / "*.tar.gz"))
    src = cache / f"src-{version}"
    src.mkdir(exist_ok=True)
    subprocess.run(["rm", "-rf", *map(str, src.iterdir())], check=True)
    subprocess.run(["tar", "xzf", sdist, "-C", str(src)], check=True)
    (root,) = [p for p in src.iterdir() if p.is_dir()]
    _patch_old_sdist(root)
    subprocess.run(pip + ["install", "-q", "--no-deps", "--target", str(target), str(root)], check=True)
    return str(target)


def _patch_old_sdist(root: pathlib.Path):
    """Old unicodedata2 sdists (9.0.0.post4, 14.0.0) build on Python 3.11 with Py_SET_TYPE for an
    assignment to Py_TYPE, and (9.0.0) CPython's old Modules/ucnhash.h (never exported here)."""
    for c in root.rglob("unicodedata.c"):
        text = c.read_text()
        c.write_text(
            text.replace("Py_TYPE(&UCD_Type) = &PyType_Type;", "Py_SET_TYPE(&UCD_Type, &PyType_Type);")
        )
        header = c.parent / "ucnhash.h"
        if '#include "ucnhash.h"' in text and not header.exists():
            header.write_text(
                "#ifndef Py_UCNHASH_H\n#define Py_UCNHASH_H\ntypedef struct {\n    int size;\n"
                "    int (*getname)(PyObject *, Py_UCS4, char *, int, int);\n"
                "    int (*getcode)(PyObject *, const char *, int, Py_UCS4 *, int);\n"
                "} _PyUnicode_Name_CAPI;\n#endif\n"
            )


def unicode_data(version: str, spec: str, cache: pathlib.Path, gc_names) -> dict[str, np.ndarray]:
    """gc, ccc, nfc_qc, nfc_trail, nfc_pairs, nfc_composites, nfc_decomp at `version` (unicodedata2 in a subprocess)."""
    out = cache / f"dump-{version}.npz"
    if out.exists():
        with np.load(out) as z:
            if "nfc_decomp" not in z.files:  # a dump by an older version of this script
                out.unlink()
    if not out.exists():
        env = dict(os.environ)
        d = _unicodedata2_dir(version, spec, cache)
        if d is not None:
            env["PYTHONPATH"] = d + os.pathsep + env.get("PYTHONPATH", "")
        subprocess.run(
            [sys.executable, "-c", _DUMP, version, str(out), " ".join(gc_names)], env=env, check=True
        )
    with np.load(out) as z:
        return {k: z[k] for k in z.files}
