"""The corpus job's JSONL corpora, built from the shared data deterministically: the source
texts, the unique documents (paragraphs, GSM8K records, WikiText articles, Python files), the
mixed corpus (those documents tiled in shuffled orders) and the long one (0.1-5 MB documents)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

from blockbpe_jax.testing import read_corpus


def source_texts(root: Path) -> dict[str, str]:
    c = root / "corpus"
    gsm = []
    for name in ("gsm8k_train.jsonl.gz", "gsm8k_test.jsonl"):
        for line in read_corpus(c / name).decode().splitlines():
            if line.strip():
                r = json.loads(line)
                gsm.append(f"Question: {r['question']}\nAnswer: {r['answer']}")
    return dict(
        war_and_peace=read_corpus(c / "war_and_peace_en.txt").decode(),
        python=read_corpus(c / "code_python_stdlib.py.txt.gz").decode(),
        wikitext=read_corpus(c / "wikitext2_test.txt.gz").decode(),
        gsm8k="\n\n".join(gsm),
        gsm8k_records=gsm,
    )


def unique_documents(src: dict[str, str]) -> list[str]:
    """Paragraphs, records, articles and files, in a fixed interleaved order."""
    paragraphs = [p.strip("\n") for p in src["war_and_peace"].split("\n\n") if p.strip()]
    files = ["# ===== file:" + f for f in src["python"].split("# ===== file:") if f.strip()]
    articles, cur = [], []
    for line in src["wikitext"].split("\n"):
        if line.startswith(" = ") and not line.startswith(" = = ") and cur:
            articles.append("\n".join(cur))
            cur = []
        cur.append(line)
    articles.append("\n".join(cur))
    docs = paragraphs + list(src["gsm8k_records"]) + [a for a in articles if a.strip()] + files
    random.Random(0).shuffle(docs)
    return docs


def build_mixed(path: Path, src: dict[str, str], target_bytes: int) -> tuple[list[str], int]:
    """Writes the mixed corpus (JSONL); returns its documents in file order and its size."""
    docs = unique_documents(src)
    lines = [(json.dumps({"text": d}, ensure_ascii=False) + "\n").encode() for d in docs]
    block = sum(map(len, lines))
    rng = random.Random(1)
    order: list[int] = []
    written = 0
    with open(path, "wb") as f:
        while written < target_bytes:
            perm = list(range(len(docs)))
            rng.shuffle(perm)
            f.write(b"".join([lines[i] for i in perm]))
            order += perm
            written += block
    return [docs[i] for i in order], written


def build_long(path: Path, src: dict[str, str], n: int) -> tuple[list[str], int]:
    """Writes `n` long documents (JSONL): whole War and Peace, then spans of 0.1-5 MB."""
    rng = random.Random(2)
    kinds = ["war_and_peace", "python", "wikitext", "gsm8k"]
    docs = [src["war_and_peace"]]
    while len(docs) < n:
        text = src[kinds[len(docs) % len(kinds)]]
        size = int(math.exp(rng.uniform(math.log(100_000), math.log(5_000_000))))
        reps = -(-(size + len(text)) // len(text))
        start = rng.randrange(len(text))
        docs.append((text * reps)[start : start + size])
    with open(path, "wb") as f:
        for d in docs:
            f.write((json.dumps({"text": d}, ensure_ascii=False) + "\n").encode())
    return docs, path.stat().st_size
