#!/usr/bin/env python3
"""`eaglevk bench --concurrency 1,3` on the tiny pair, JSON out: one entry per client count, each
with every request of every client finished (clients x -r), positive rates, p50 <= p99, and with
the draft an acceptance length of at least 1 and inter-token gaps measured. Usage:
check_bench_concurrency.py EAGLEVK ASSETS"""
import json
import subprocess
import sys

eaglevk, assets = sys.argv[1], sys.argv[2]
reps = 2
out = subprocess.run([eaglevk, "bench", "-d", f"{assets}/tiny-llama3-eagle3", "-p", "16", "-n", "12", "-r", str(reps),
                      "--concurrency", "1,3", "-o", "json"], capture_output=True, text=True, timeout=240)
if out.returncode != 0:
    sys.exit(f"bench failed ({out.returncode}):\n{out.stderr}")
entries = json.loads(out.stdout)
problems = []
if [e["clients"] for e in entries] != [1, 3]:
    problems.append(f"client counts {[e['clients'] for e in entries]}, expected [1, 3]")
for e in entries:
    c = e["clients"]
    if e["requests"] != c * reps:
        problems.append(f"{c} clients: {e['requests']} requests finished, expected {c * reps}")
    if not (e["requests_per_s"] > 0 and e["output_tokens_per_s"] > 0 and e["seconds"] > 0):
        problems.append(f"{c} clients: rates not positive: {e}")
    if not (0 < e["ttft_p50_s"] <= e["ttft_p99_s"]):
        problems.append(f"{c} clients: TTFT p50 {e['ttft_p50_s']} p99 {e['ttft_p99_s']}")
    if e["itl_p50_s"] is None or not (0 < e["itl_p50_s"] <= e["itl_p99_s"]):
        problems.append(f"{c} clients: ITL p50 {e['itl_p50_s']} p99 {e['itl_p99_s']} (a draft's rounds make gaps)")
    if e["mean_acceptance_length"] < 1:
        problems.append(f"{c} clients: acceptance length {e['mean_acceptance_length']}")
    # Output tokens per second is every request's -n tokens over the measured time.
    if abs(e["output_tokens_per_s"] * e["seconds"] - 12 * e["requests"]) > 1e-6 * 12 * e["requests"] + 1e-6:
        problems.append(f"{c} clients: {e['output_tokens_per_s'] * e['seconds']} tokens, expected {12 * e['requests']}")
for p in problems:
    print("FAILED ", p)
print(f"{len(entries)} measurements, {len(problems)} problems")
sys.exit(1 if problems else 0)
