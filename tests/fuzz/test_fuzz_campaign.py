"""The GPU fuzz campaign's tool (benchmarks/fuzz_campaign.py, fuzz_check.py, fuzz_chunks.py, fuzz_strings.py)
on the CPU executor: a small campaign finds no mismatch against the references; an id
corrupted on the device side or on the reference side is reported, with an input that
reproduces it and the string's number, from which the same input is generated again; several
families with counts of their own run in one invocation into one report; the device
comparison agrees with the host's on every kind of difference; the generator keeps its
promises (valid or invalid UTF-8 as asked, 0 .. 64 KiB, every kind of text, chunks that depend
on their seed alone)."""

from __future__ import annotations

import base64
import json
import os
import random
import unicodedata

import numpy as np
import pytest

from helpers import benchmark_module, is_utf8

pytestmark = pytest.mark.usefixtures("data_dir")


def campaign():
    return benchmark_module("fuzz_campaign")


def run(tmp_path, families: str, *options) -> dict:
    """The report of a campaign on the CPU executor with two pool processes."""
    argv = ["--families", families, "--device", "cpu", "--workers", "2", "--out", str(tmp_path), *options]
    campaign().main(argv)
    return json.loads((tmp_path / "fuzz_campaign.json").read_text())


def reference_ids(key: str, variant_name: str, raw: bytes) -> list[int]:
    """Family `key`'s reference for one string in variant `variant_name`."""
    fc = campaign()
    family = fc.load_family(fc.testing.data_dir(), key, 1)
    (variant,) = [v for v in family.variants if v.name == variant_name]
    return variant.reference([raw])[0]


def test_small_campaign_has_no_mismatch_and_a_corrupted_id_is_caught(tmp_path):
    before = os.environ.get("BLOCKBPE_KERNEL")
    report = run(tmp_path / "clean", "cl100k=300", "--kernel", "piece")  # (the CPU has one kernel)
    assert report["kernel"] == "piece" and os.environ.get("BLOCKBPE_KERNEL") == before
    (clean,) = report["families"]
    assert clean["strings"] == 300 and clean["complete"] and clean["bytes"] > 0
    assert clean["mismatches"] == 0, clean["first_mismatches"]
    assert sum(v["strings"] for v in clean["variants"].values()) == 300
    assert all(v["strings"] > 0 for v in clean["variants"].values())
    (corrupt,) = run(tmp_path / "corrupt", "cl100k=300", "--corrupt")["families"]
    assert corrupt["bytes"] == clean["bytes"]  # same seed: the same strings
    assert corrupt["corrupted_rows"] >= 2  # one a batch (of the non-empty ones)
    assert corrupt["mismatches"] == corrupt["corrupted_rows"]
    first = corrupt["first_mismatches"][0]
    assert first["first_difference"] == 0 and first["ours"][0] == first["reference"][0] + 1
    raw = base64.b64decode(first["input_base64"])
    assert len(raw) == first["bytes"]
    # The reproducer: the string's number makes the same input; the reference agrees with the JSON.
    fc = campaign()
    variant, again = fc.fuzz_chunks.regenerate(fc.testing.data_dir(), "cl100k", 0, first["string"])
    assert (variant, again) == (first["variant"], raw)
    k = first["first_difference"]
    assert reference_ids("cl100k", variant, raw)[max(0, k - 3) : k + 5] == first["reference"]


def test_a_wrong_reference_id_is_reported_with_its_input():
    """A chunk made in this process, one id of its references changed: the device's row then
    differs, and the report names that string, its input and the two ids."""
    fc = campaign()
    chunks = fc.fuzz_chunks
    root = fc.testing.data_dir()
    chunks.init_worker(str(root))
    chunk = chunks.run_chunk("gpt2_hf", 3, 1, 200)
    group = max(chunk.groups, key=lambda g: len(g.ref_ids))
    k = len(group.ref_ids) // 2  # an id in the middle of some string
    row = int(np.searchsorted(np.cumsum(group.ref_counts), k, side="right"))
    group.ref_ids[k] += 1
    family = fc.load_family(root, "gpt2_hf", 1)
    check = fc.fuzz_check.FamilyCheck(family, 200, fc.jax.devices("cpu")[0], 1 << 16, corrupt=False)
    check.add_chunk(chunk)
    summary = check.finish(complete=True)
    assert summary["strings"] == 200 and summary["mismatches"] == 1
    (bad,) = summary["first_mismatches"]
    assert bad["string"] == int(group.index[row]) and bad["variant"] == group.variant
    raw = base64.b64decode(bad["input_base64"])
    assert raw == group.strings[row]
    assert (
        bad["reference"][min(3, bad["first_difference"])] == bad["ours"][min(3, bad["first_difference"])] + 1
    )
    assert chunks.regenerate(root, "gpt2_hf", 3, bad["string"]) == (group.variant, raw)


def test_a_family_stopped_early_drops_the_batches_it_has_not_sent():
    """finish(complete=False), as a spent time budget calls it, sends nothing more: the strings
    still gathering are not checked (nor counted); finish(complete=True) sends and checks them."""
    fc = campaign()
    root = fc.testing.data_dir()
    fc.fuzz_chunks.init_worker(str(root))
    chunk = fc.fuzz_chunks.run_chunk("r50k", 5, 0, 120)
    family = fc.load_family(root, "r50k", 1)
    cpu = fc.jax.devices("cpu")[0]
    counts = []
    for complete in (False, True):
        check = fc.fuzz_check.FamilyCheck(family, 120, cpu, 1 << 24, corrupt=False)
        check.add_chunk(chunk)  # (batches of 1 << 24 bytes: none is full, so none is sent yet)
        counts.append(check.finish(complete=complete)["strings"])
    assert counts == [0, 120]


def test_families_with_counts_of_their_own_in_one_run(tmp_path):
    report = run(tmp_path, "r50k=40,llama3_hf=2100,qwen2_nfc=30")
    rows = report["families"]
    assert [f["family"] for f in rows] == ["r50k", "llama3_hf", "qwen2_nfc"]
    assert [f["strings"] for f in rows] == [40, 2100, 30]
    assert rows[1]["chunks"] == 2  # more than one chunk of a family
    assert all(f["complete"] and f["mismatches"] == 0 for f in rows), [f["first_mismatches"] for f in rows]
    assert report["plan"] == [
        {"family": k, "strings": n} for k, n in [("r50k", 40), ("llama3_hf", 2100), ("qwen2_nfc", 30)]
    ]
    assert report["platform"] == "cpu" and report["workers"] == 2 and "mix" in report
    assert report["chunk_strings"] == campaign().fuzz_chunks.CHUNK


def test_a_spent_time_budget_skips_the_families(tmp_path):
    report = run(tmp_path, "r50k=40,cl100k=40", "--time-budget", "0")
    assert [f.get("skipped") for f in report["families"]] == ["time budget spent"] * 2


def test_the_plan_names_known_families_and_positive_counts():
    parse = campaign().parse_plan
    assert parse("cl100k,o200k=5", 7) == [("cl100k", 7), ("o200k", 5)]
    for bad in ("cl100k=0", "cl100k=x", "nope", "cl100k=-3"):
        with pytest.raises(ValueError):
            parse(bad, 7)


def random_rows(rng: random.Random, T: int):
    """Random references and a device output that matches them (truncated where too long)."""
    refs = [[rng.randrange(1, 50) for _ in range(rng.choice([0, 1, 2, T, T + 2]))] for _ in range(12)]
    ids = np.zeros((len(refs) + 2, T), np.int32)  # two padding rows past the references
    counts = np.zeros(len(refs) + 2, np.int32)
    for k, r in enumerate(refs):
        ids[k, : min(len(r), T)] = r[:T]
        counts[k] = len(r)
    return refs, ids, counts


def device_mismatches(ids, counts, refs) -> list[int]:
    """compare_rows on the CPU executor, the references laid out as FamilyCheck sends them."""
    fc = campaign()
    ref_counts = np.zeros(len(ids), np.int32)
    ref_counts[: len(refs)] = [len(r) for r in refs]
    ref_offsets = np.concatenate([[0], np.cumsum(ref_counts[:-1])]).astype(np.int32)
    flat = np.array([i for r in refs for i in r] + [0] * 16, np.int32)
    verdict, _ = fc.fuzz_check.compare_rows(ids, counts, ref_counts, ref_offsets, flat, False)
    return np.flatnonzero(np.asarray(verdict)[0]).tolist()


def test_host_and_device_comparisons_see_each_kind_of_difference():
    rows = campaign().fuzz_check.row_mismatches
    rng = random.Random(4)
    for _ in range(20):
        T = rng.choice([1, 3, 5])
        refs, ids, counts = random_rows(rng, T)
        assert rows(ids, counts, refs).tolist() == [] == device_mismatches(ids, counts, refs)
        for k, r in enumerate(refs):
            for change in ("id", "count", "padding"):
                if change == "id" and not r or change == "padding" and len(r) >= T:
                    continue
                bad_ids, bad_counts = ids.copy(), counts.copy()
                if change == "id":
                    bad_ids[k, rng.randrange(min(len(r), T))] += 1
                elif change == "padding":
                    bad_ids[k, rng.randrange(len(r), T)] = 7
                else:
                    bad_counts[k] += rng.choice([-1, 1]) if r else 1
                assert rows(bad_ids, bad_counts, refs).tolist() == [k], (k, change)
                assert device_mismatches(bad_ids, bad_counts, refs) == [k], (k, change)


def test_generator_strings():
    fuzz_strings = campaign().fuzz_strings
    corpora = [b"plain prose, with some words. " * 100]
    specials = ["<|endoftext|>", "<｜begin▁of▁sentence｜>"]
    source = fuzz_strings.StringSource(7, specials, corpora)
    strings = [source.draw(invalid=k % 3 == 0) for k in range(2000)]
    for k, s in enumerate(strings):
        assert len(s) <= fuzz_strings.MAX_LEN
        assert is_utf8(s) == (k % 3 != 0), s[:80]
    lengths = [len(s) for s in strings]
    assert 0 in lengths and max(lengths) > 16384 and sum(n <= 64 for n in lengths) > 600
    text = "".join(s.decode() for k, s in enumerate(strings) if k % 3)
    assert specials[0] in text and specials[1] in text
    assert any(unicodedata.category(c) == "Mn" for c in text)  # combining marks
    for probe in ("\u3000", "\u2029", "  \t", "٣", "0123", "中", "ж", "ب", "👍"):
        assert any(probe in s.decode() for k, s in enumerate(strings) if k % 3) or probe in text, probe
    again = fuzz_strings.StringSource(7, specials, corpora)
    assert [again.draw(invalid=k % 3 == 0) for k in range(2000)] == strings


def test_a_chunk_depends_on_its_seed_alone():
    """Chunks made in any order, a prefix of a chunk the same as the chunk's start."""
    fc = campaign()
    chunks = fc.fuzz_chunks
    family = fc.load_family(fc.testing.data_dir(), "cl100k", 1)
    corpora = [b"some prose. " * 500]

    def source():
        return fc.fuzz_strings.StringSource(chunks.family_seed(5, "cl100k"), family.specials, corpora)

    one = source()
    in_order = [chunks.chunk_strings(family, one, 5, c, 50) for c in range(3)]
    other = source()
    assert chunks.chunk_strings(family, other, 5, 2, 50) == in_order[2]
    assert chunks.chunk_strings(family, other, 5, 0, 20) == in_order[0][:20]
    assert in_order[0] != in_order[1]
    assert chunks.chunk_strings(family, other, 6, 0, 50) != in_order[0]  # another seed
    assert {p for c in in_order for p, _ in c} == set(range(len(family.variants)))


def test_a_family_that_fails_is_recorded_and_the_others_go_on(monkeypatch):
    fc = campaign()
    add_chunk = fc.fuzz_check.FamilyCheck.add_chunk

    def failing(self, chunk):
        if chunk.key == "r50k":
            raise RuntimeError("a planted failure")
        add_chunk(self, chunk)

    monkeypatch.setattr(fc.fuzz_check.FamilyCheck, "add_chunk", failing)
    plan = [("r50k", 3000), ("cl100k", 60)]
    rows = fc.campaign(plan, 0, fc.jax.devices("cpu")[0], 2, float("inf"), 1 << 16)
    assert rows[0] == {"family": "r50k", "error": "RuntimeError: a planted failure"}
    assert rows[1]["strings"] == 60 and rows[1]["mismatches"] == 0 and rows[1]["complete"]
