"""The `memory` part of run_all.py: device table bytes per vocabulary, the workspace rule per
batch shape (every grid's shapes), and XLA's memory_analysis() of whole cl100k calls."""

from __future__ import annotations

import time

from grids import PAPER_BATCHES, PAPER_LENGTHS, PEER_GRID, SCALE_LENGTH_BATCHES, SCALE_LENGTHS
from harness import log


def part_memory(ctx, res):
    bb, testing = ctx["bb"], ctx["testing"]
    smem_max = int(bb.native.cpu.smem_max_len)
    modes = {"exact": 2, "bytes": 0}  # the workspace depends only on whether mode is bytes
    names = bb.ops.primitive.TABLE_OPERANDS
    vocabs = {}
    for name, (rel, _) in testing.VOCAB_FILES.items():
        if ctx["quick"] and name not in ("r50k", "cl100k"):
            continue
        t = time.perf_counter()
        try:
            tok = ctx["tokenizer"](name)
        except Exception as e:  # noqa: BLE001
            vocabs[name] = {"error": repr(e)[:300]}
            continue
        load_s = time.perf_counter() - t
        tabs = tok.host_tables()
        v = {
            "file": rel,
            "n_vocab": int(tok.vocab.n_vocab),
            "pattern": tok.vocab.pattern_name,
            "table_nbytes": int(tok.table_nbytes()),
            "table_nbytes_all_specials": int(tok.table_nbytes("all")),
            "tables": {(names[i] if i < len(names) else f"t{i}"): int(a.nbytes) for i, a in enumerate(tabs)},
            "load_s": load_s,
        }
        vocabs[name] = v
        log(
            f"  {name:7s} n_vocab={v['n_vocab']:7d} tables={v['table_nbytes'] / 2**20:7.2f} MiB "
            f"(load {load_s:.1f} s)"
        )

    def workspace(batch, length, mode="exact"):
        size = bb.native.workspace_bytes(batch, length, modes[mode], 0)  # the kernel's own rule (byte-level)
        return 0 if size <= 1 else size

    shapes = sorted(
        {
            *PEER_GRID,
            *[(b, l) for b in PAPER_BATCHES for l in PAPER_LENGTHS],
            *[(b, l) for b in SCALE_LENGTH_BATCHES for l in SCALE_LENGTHS],
            (4096, 512),
            (1024, 16384),
            (1024, 65536),
        }
    )
    ws = [
        {
            "batch": b,
            "bytes": l,
            "workspace_bytes_exact": workspace(b, l, "exact"),
            "workspace_bytes_bytes_mode": workspace(b, l, "bytes"),
            "ids_bytes": b * l * 4 + b * 4,
            "input_bytes": b * l + b * 4,
        }
        for b, l in shapes
    ]
    # XLA's accounting of whole calls (cl100k, T = L): arguments (input + tables), outputs
    # (ids, counts, and the workspace, which is an output), temporaries.
    measured = []
    try:
        ours = ctx["ours"]("cl100k")
        mshapes = (
            [(8, 128), (16, 9000)]
            if ctx["quick"]
            else [
                (64, 512),
                (1024, 512),
                (1024, 4096),
                (4096, 512),
                (1024, 16384),
                (64, 1 << 20),
                (1, 1 << 20),
            ]
        )
        for mode in ("exact", "bytes"):
            for b, l in mshapes:
                try:
                    ma = ours.memory_analysis(mode, 256, b, l, l)
                except Exception as e:  # noqa: BLE001
                    ma = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
                measured.append(
                    {
                        "mode": mode,
                        "batch": b,
                        "bytes": l,
                        "max_tokens": l,
                        "workspace_bytes_rule": workspace(b, l, mode),
                        **ma,
                    }
                )
    except Exception as e:  # noqa: BLE001
        measured.append({"error": f"{type(e).__name__}: {e}"[:300]})
    res["memory"] = {
        "vocabs": vocabs,
        "xla_memory_analysis_cl100k": measured,
        "smem_max_len": smem_max,
        "workspace_rule": (
            f"exact mode, L <= {smem_max}: B * ceil16(L) * 12 bytes (the merge-pass "
            f"buffers; the rest is in shared memory); bytes mode, L <= {smem_max}: 0; "
            f"L > {smem_max}: B * ceil16(L) * 23 bytes; allocated by XLA as a "
            "discarded output (ffi/binding/encode_params.h)"
        ),
        "ids_rule": "ids int32[B, T] + counts int32[B]; the benchmark uses T = L (never truncates)",
        "shapes": ws,
    }
