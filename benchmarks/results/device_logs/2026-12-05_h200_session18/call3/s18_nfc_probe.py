"""Where an NFC tokenizer's encode_batch spends its time against the plain one (1024 x 4 KiB War and Peace)."""
import cProfile, io, pstats, sys, time, statistics
sys.path.insert(0, "benchmarks")
import jax
import blockbpe_jax as bb
from blockbpe_jax import staging, native
from blockbpe_jax.pretok import nfc_data
from blockbpe_jax.testing import data_dir, read_corpus
from blockbpe_jax.vocab.hf_json import vocab_from_tokenizer_json
from harness import spread_excerpts
from nfc_throughput import tokenizer_doc

dev = jax.devices()[0]
prose = read_corpus(data_dir() / "corpus/war_and_peace_en.txt").decode()
texts = spread_excerpts(prose, 1024, 4096)
toks = {n: bb.Tokenizer(vocab_from_tokenizer_json(tokenizer_doc(n == "nfc"), f"llama3-{n}")) for n in ("nfc", "plain")}

def med(fn, reps=20):
    fn(); ts = []
    for _ in range(reps):
        t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
    return round(statistics.median(ts) * 1e6)

for name, tok in toks.items():
    sb = tok._staged_batch(texts, device=dev); print(name, "finishes:", sb.finishes); sb.encode().ids.block_until_ready()
    print(name, "e2e us", med(lambda: tok.encode_batch(texts, device=dev).ids.block_until_ready()))
    print(name, "stage us", med(lambda: (lambda s: (s.cancel()))(staging.stage_strings(texts, max_len=None, device=dev, nfc=nfc_data.operand() if name == "nfc" else None))))
    sb = tok._staged_batch(texts, device=dev)
    out = sb.dispatch(); out.ids.block_until_ready()
    def disp():
        s = tok._staged_batch(texts, device=dev)
        t = time.perf_counter(); o = s.dispatch(); d = time.perf_counter() - t
        o.ids.block_until_ready(); return d
    ds = sorted(disp() for _ in range(20)); print(name, "dispatch us (median)", round(ds[10] * 1e6))
    data = jax.device_put(bb.pack_strings(texts)[0], dev); lengths = jax.device_put(bb.pack_strings(texts)[1], dev)
    tables = tok.tables(device=dev)
    f = jax.jit(lambda d, l: bb.encode(d, l, tables, max_tokens=d.shape[1], check_lengths=False))
    print(name, "device encode us", med(lambda: f(data, lengths).ids.block_until_ready()))
    pr = cProfile.Profile(); pr.enable()
    for _ in range(30): tok.encode_batch(texts, device=dev).ids.block_until_ready()
    pr.disable(); s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(12); print(s.getvalue()[:3000])
