"""The GPU fuzz campaign's tool (benchmarks/fuzz_campaign.py) on the CPU executor: a small
campaign finds no mismatch against tiktoken, the same campaign with one id corrupted per batch
reports exactly those rows, families run in processes of their own merge into one report, the
row comparison catches every kind of difference, and the
generator (benchmarks/fuzz_strings.py) keeps its promises (valid or invalid UTF-8 as asked,
0 .. 64 KiB, the same strings from the same seed)."""

from __future__ import annotations

import base64
import functools
import importlib.util
import json
import os
import sys

import numpy as np
import pytest

from helpers import REPO, is_utf8

pytestmark = pytest.mark.usefixtures("data_dir")


@functools.cache
def campaign():
    path = REPO / "benchmarks" / "fuzz_campaign.py"
    spec = importlib.util.spec_from_file_location("fuzz_campaign", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["fuzz_campaign"] = module  # (dataclasses look their module up)
    spec.loader.exec_module(module)
    return module


def run(tmp_path, *options) -> tuple[dict, dict]:
    """(the report, its one family's summary) of a 100-string cl100k campaign on the CPU."""
    argv = ["--families", "cl100k", "--strings", "100", "--device", "cpu", "--out", str(tmp_path), *options]
    campaign().main(argv)
    report = json.loads((tmp_path / "fuzz_campaign.json").read_text())
    (family,) = report["families"]
    return report, family


def test_small_campaign_has_no_mismatch_and_a_corrupted_id_is_caught(tmp_path):
    before = os.environ.get("BLOCKBPE_KERNEL")
    report, clean = run(tmp_path / "clean", "--kernel", "piece")  # (the CPU executor has one kernel)
    assert report["kernel"] == "piece" and os.environ.get("BLOCKBPE_KERNEL") == before
    assert clean["strings"] == 100 and clean["complete"] and clean["bytes"] > 0
    assert clean["mismatches"] == 0, clean["first_mismatches"]
    assert sum(v["strings"] for v in clean["variants"].values()) == 100
    _, corrupt = run(tmp_path / "corrupt", "--corrupt")
    assert corrupt["bytes"] == clean["bytes"]  # same seed: the same strings
    assert corrupt["corrupted_rows"] >= 1
    assert corrupt["mismatches"] == corrupt["corrupted_rows"]
    first = corrupt["first_mismatches"][0]
    assert first["first_difference"] == 0 and first["ours"][0] == first["reference"][0] + 1
    assert len(base64.b64decode(first["input_base64"])) == first["bytes"]


def test_families_in_processes_of_their_own(tmp_path):
    """--jobs: each family in its own process, their summaries merged in the order asked."""
    argv = ["--families", "r50k,cl100k", "--strings", "40", "--device", "cpu", "--jobs", "2"]
    assert campaign().main([*argv, "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "fuzz_campaign.json").read_text())
    assert [f["family"] for f in report["families"]] == ["r50k", "cl100k"] and report["jobs"] == 2
    assert all(f["strings"] == 40 and f["mismatches"] == 0 for f in report["families"])
    assert report["platform"] == "cpu" and "mix" in report


def test_row_mismatches_sees_each_kind_of_difference():
    refs = [[1, 2, 3], [], [4, 5], [6, 7, 8, 9], [10]]
    T = 3
    ids = np.zeros((len(refs) + 2, T), np.int32)  # two padding rows past the references
    counts = np.zeros(len(refs) + 2, np.int32)
    for k, r in enumerate(refs):
        ids[k, : min(len(r), T)] = r[:T]
        counts[k] = len(r)
    rows = campaign().row_mismatches
    assert rows(ids, counts, refs).tolist() == []  # row 3 is truncated: its prefix and count match
    changes = [(0, "id"), (2, "count"), (1, "count"), (3, "id"), (4, "count"), (1, "padding"), (4, "padding")]
    for k, change in changes:
        bad_ids, bad_counts = ids.copy(), counts.copy()
        if change == "id":
            bad_ids[k, min(len(refs[k]), T) - 1] += 1
        elif change == "padding":
            bad_ids[k, -1] = 7
        else:
            bad_counts[k] += 1
        assert rows(bad_ids, bad_counts, refs).tolist() == [k], (k, change)


def test_generator_strings():
    fuzz_strings = campaign().fuzz_strings
    corpora = [b"plain prose, with some words. " * 100]
    specials = ["<|endoftext|>", "<｜begin▁of▁sentence｜>"]
    source = fuzz_strings.StringSource(7, specials, corpora)
    strings = [source.draw(invalid=k % 3 == 0) for k in range(600)]
    for k, s in enumerate(strings):
        assert len(s) <= fuzz_strings.MAX_LEN
        assert is_utf8(s) == (k % 3 != 0), s[:80]
    assert any(len(s) > 4096 for s in strings) and any(len(s) == 0 for s in strings)
    again = fuzz_strings.StringSource(7, specials, corpora)
    assert [again.draw(invalid=k % 3 == 0) for k in range(600)] == strings
