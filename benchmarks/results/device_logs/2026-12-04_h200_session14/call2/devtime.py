"""Per-encode device time measured three ways, to see what the chain's figure holds."""
import sys, time, statistics, pathlib, os, json
sys.path.insert(0, "benchmarks")
import jax, numpy as np
import blockbpe_jax as bb
from blockbpe_jax import testing
from harness import Ours, excerpts, measure

root = testing.data_dir()
tok = bb.Tokenizer.from_file(root / "vocab" / testing.VOCAB_FILES["cl100k"][0])
raw = (root / "corpus" / "war_and_peace_en.txt").read_bytes()
dev = jax.devices()[0]
ours = Ours(bb, tok, dev, "cl100k")
out = []
for cache in ("1", "0"):
    os.environ["BLOCKBPE_MISS_CACHE"] = cache
    for B, L in ((1024, 4096), (1024, 512), (64, 512)):
        texts = excerpts(raw, B, L)
        total = sum(len(t.encode()) for t in texts)
        data, lengths = ours.put(*bb.pack_strings(texts, max_len=L))
        row = {"cache": cache, "B": B, "L": L}
        for chain in (1, 8, 32):
            g = ours.fn("exact", 256, L, chain=chain)
            g(data, lengths)[0].block_until_ready()
            m = measure(lambda: g(data, lengths)[0].block_until_ready(), target_s=0.3)
            row[f"blocking_chain{chain}_us"] = m["s"] / chain * 1e6
            # pipelined: N executions dispatched back to back, one wait at the end
            reps = []
            for _ in range(7):
                N = max(4, 256 // chain)
                t = time.perf_counter()
                for _ in range(N):
                    r = g(data, lengths)
                r[0].block_until_ready()
                reps.append((time.perf_counter() - t) / (N * chain) * 1e6)
            row[f"pipelined_chain{chain}_us"] = statistics.median(reps)
        row["marginal_8_32_us"] = (row["blocking_chain32_us"] * 32 - row["blocking_chain8_us"] * 8) / 24
        row["GBps_pipelined32"] = total / (row["pipelined_chain32_us"] * 1e-6) / 1e9
        print(json.dumps({k: (round(v, 1) if isinstance(v, float) else v) for k, v in row.items()}), flush=True)
