"""Per CUDA line: stall samples (all), warp-instructions executed, and top stall reasons, from
ncu's source page exported with --print-source cuda,sass (CSV)."""
import csv, sys, collections
def load(path):
    rows = {}
    f = None; header = None
    for rec in csv.reader(open(path)):
        if not rec: continue
        if rec[0] == "File Path": f = rec[1].split("/")[-1]; continue
        if rec[0] == "Function Name": continue
        if rec[0] == "Line No": header = rec; continue
        if rec[0] == "" : continue  # sass rows
        d = dict(zip(header, rec))
        def num(k):
            v = d.get(k, "0")
            try: return float(v)
            except ValueError: return 0.0
        key = (f, int(rec[0]))
        stalls = {h: num(h) for h in header if h.startswith("stall_") and "Not Issued" not in h}
        rows[key] = dict(src=rec[1].strip(), samples=num("Warp Stall Sampling (All Samples)"),
                         inst=num("Instructions Executed"), stalls=stalls)
    return rows
a = load(sys.argv[1])
ts = sum(r["samples"] for r in a.values()); ti = sum(r["inst"] for r in a.values())
print(f"total samples {ts:.0f} warp-inst {ti:.0f}")
byf = collections.Counter(); byfi = collections.Counter()
for (f, l), r in a.items(): byf[f] += r["samples"]; byfi[f] += r["inst"]
for f, s in byf.most_common(14): print(f"{f:32s} samples {100*s/ts:5.1f}% inst {100*byfi[f]/ti:5.1f}%")
tot = collections.Counter()
for r in a.values():
    for k, v in r["stalls"].items(): tot[k] += v
print("stall reasons:", ", ".join(f"{k[6:]} {100*v/ts:.1f}%" for k, v in tot.most_common(8)))
N = int(sys.argv[2]) if len(sys.argv) > 2 else 40
for (f, l), r in sorted(a.items(), key=lambda kv: -kv[1]["samples"])[:N]:
    top = sorted(r["stalls"].items(), key=lambda kv: -kv[1])[:2]
    print(f"{100*r['samples']/ts:5.1f}% {100*r['inst']/ti:5.1f}%i {f}:{l} [{', '.join(f'{k[6:]} {v:.0f}' for k, v in top)}] {r['src'][:110]}")
