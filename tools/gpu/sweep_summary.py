# Reads sweep.csv lines "SHAPE;<Google Benchmark csv row>" (run_checks.sh) and prints ms per benchmark per shape,
# the geometric-mean ratio to the default, and the best shape (last line: BEST=<shape>).
import csv, math, sys, collections
rows = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    shape, rest = line.split(";", 1)
    r = next(csv.reader([rest]))
    name = r[0].split("/min_time")[0].replace("BM_Matvec/", "")
    rows[shape][name] = float(r[2])  # real_time (ms, manual time)
names = sorted({n for s in rows.values() for n in s})
base = rows.get("default", {})
print("shape".ljust(10), " ".join(n.ljust(16) for n in names), "geo/default")
best, best_g = "default", 1.0
for s, v in rows.items():
    ok = [n for n in names if n in v and n in base]
    g = math.exp(sum(math.log(v[n] / base[n]) for n in ok) / len(ok)) if ok and len(ok) == len(names) else float("nan")
    print(s.ljust(10), " ".join(f"{v.get(n, float('nan')):.4f}".ljust(16) for n in names), f"{g:.3f}")
    if g == g and g < best_g: best, best_g = s, g
print(f"BEST={best}")
