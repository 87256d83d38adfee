#!/usr/bin/env python3
"""tools/gpu/summarize.py's split and best_gemm sections on a synthetic raw folder: gpu_check.sh's split step
writes split_NAME_one.json (one device), split_NAME_two.json (--devices 0,0) and
split_NAME_model.json (`inspect --json`); the figures below were worked out by hand from the
formulas docs/gpu-check.md states, not by running the code under test.
  check_gpu_summarize.py SUMMARIZE_PY
"""
import json
import os
import subprocess
import sys
import tempfile


def bench(*tests):
    """An `eaglevk bench -o json` array of (test, tokens/s, acceptance length) and its load entry."""
    out = [{"model": "m", "device": "d", "test": t, "tokens_per_s": tps, "stddev": 0.5, "mean_acceptance_length": al}
           for t, tps, al in tests]
    return out + [{"model": "m", "device": "d", "test": "load", "seconds": 1.0}]


def main():
    summarize = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        raw = os.path.join(tmp, "raw")
        os.mkdir(raw)

        def write(name, value, before=""):
            with open(os.path.join(raw, name), "w") as f:
                f.write(before + json.dumps(value, indent=1))

        # The 8B pair in one load a side: a 512-row prefill, a decode, a k=3 chain.
        write("split_pair_model.json", {"architecture": "LlamaForCausalLM", "config": {"hidden_size": 4096}})
        write("split_pair_one.json", bench(("pp512", 1000.0, 0.0), ("tg64", 100.0, 0.0), ("spec-tg64 k=3", 150.0, 2.0),
                                           ("tg16", 10.0, 0.0)))
        # A line before the document, as a program may print one on stdout.
        write("split_pair_two.json", bench(("pp512", 800.0, 0.0), ("tg64", 80.0, 0.0), ("spec-tg64 k=3", 120.0, 2.0)),
              before="a line before the JSON\n")
        # A part whose inspect failed: no bytes, the times still; a prefill longer than a pass.
        write("split_plain_one.json", bench(("pp1024", 1000.0, 0.0)))
        write("split_plain_two.json", bench(("pp1024", 500.0, 0.0)))
        # A part with no two-device run (its step cut short): nothing listed.
        write("split_chain_one.json", bench(("tg32", 50.0, 0.0)))
        # The kernel table's GEMM rows under --gemm-variants: three configurations of one product,
        # and one product timed only under the device's choice (no best_gemm entry for it).
        def gemm(matrix, us, block, prefetch, f16, tile_k, default, registers=None):
            row = {"kernel": "gemm_coopmat", "type": "q4_k", "matrix": matrix, "n": 28672, "k": 4096, "rows": 512,
                   "median_us": us, "tflop_per_s": 2.0 * 28672 * 4096 * 512 / (us * 1e6), "gemm_block": block,
                   "gemm_prefetch": prefetch, "gemm_f16_inputs": f16, "gemm_tile_k": tile_k, "gemm_default": default}
            row["pipeline_statistics"] = {"Register Count": registers} if registers else {}
            return row
        write("kernel_table.json", {"device": "d", "ceiling": {"read_gb_per_s": 1000.0}, "kernels": [
            gemm("gate_up", 1000.0, 128, False, False, 32, True, 168),
            gemm("gate_up", 1200.0, 64, False, False, 32, False, 96),
            gemm("gate_up", 800.0, 128, True, True, 64, False, 128),
            gemm("o_proj", 300.0, 128, False, False, 32, True)]})
        out = os.path.join(tmp, "summary.json")
        subprocess.run([sys.executable, summarize, raw, out, "100"], check=True, stdout=subprocess.DEVNULL)
        summary = json.load(open(out))
        got = {(t["part"], t["test"]): t for t in summary["split"]}
        best_gemm = summary.get("best_gemm")

    want = {
        # (1/800 - 1/1000) s = 0.25 ms a token; 512 rows a pass: 128 ms; 512 x 4096 x 4 bytes.
        ("pair", "pp512"): {"two_over_one": 0.8, "hop_ms_per_token": 0.25, "rows_per_pass": 512, "tokens_per_pass": 512,
                            "hop_ms_per_pass": 128.0, "hop_bytes_per_pass": 8388608, "hop_bytes_per_token": 16384},
        # (1/80 - 1/100) s = 2.5 ms; one row: 4096 x 4 bytes.
        ("pair", "tg64"): {"two_over_one": 0.8, "hop_ms_per_token": 2.5, "rows_per_pass": 1, "tokens_per_pass": 1,
                           "hop_ms_per_pass": 2.5, "hop_bytes_per_pass": 16384, "hop_bytes_per_token": 16384},
        # (1/120 - 1/150) s = 5/3 ms a token; 2 tokens a round: 10/3 ms; 4 rows x (4096 + 3 x 4096
        # taps) x 4 bytes = 262144, over 2 tokens.
        ("pair", "spec-tg64 k=3"): {"two_over_one": 0.8, "hop_ms_per_token": 5 / 3, "rows_per_pass": 4,
                                    "tokens_per_pass": 2.0, "hop_ms_per_pass": 10 / 3, "hop_bytes_per_pass": 262144,
                                    "hop_bytes_per_token": 131072},
        # (1/500 - 1/1000) s = 1 ms; passes of 512 rows (bench's largest): 512 ms a pass; no hidden size.
        ("plain", "pp1024"): {"two_over_one": 0.5, "hop_ms_per_token": 1.0, "rows_per_pass": 512,
                              "tokens_per_pass": 512, "hop_ms_per_pass": 512.0},
    }
    errors = []
    if set(got) != set(want):
        errors.append(f"tests listed: {sorted(got)}, want {sorted(want)}")
    for key, fields in want.items():
        t = got.get(key, {})
        for field, value in fields.items():
            if not isinstance(t.get(field), (int, float)) or abs(t[field] - value) > 1e-9 * max(1.0, abs(value)):
                errors.append(f"{key} {field}: {t.get(field)}, want {value}")
    if "hop_bytes_per_pass" in got.get(("plain", "pp1024"), {}):
        errors.append("bytes given without the model's hidden size")
    # best_gemm: 1000 / 800 us = 1.25, the fastest's configuration and registers beside the default's.
    want_gemm = {"q4_k gate_up rows 512": {
        "fastest": {"block": 128, "prefetch": True, "f16_inputs": True, "tile_k": 64}, "fastest_us": 800.0,
        "fastest_registers": 128, "default": {"block": 128, "prefetch": False, "f16_inputs": False, "tile_k": 32},
        "default_us": 1000.0, "default_registers": 168, "speedup": 1.25}}
    for key, fields in want_gemm.items():
        entry = (best_gemm or {}).get(key, {})
        for field, value in fields.items():
            if entry.get(field) != value:
                errors.append(f"best_gemm {key} {field}: {entry.get(field)}, want {value}")
    if set(best_gemm or {}) != set(want_gemm):
        errors.append(f"best_gemm lists {sorted(best_gemm or {})}, want {sorted(want_gemm)}")
    if errors:
        print("\n".join(errors))
        sys.exit(1)
    print(f"split section: {len(got)} tests as computed by hand; best_gemm as computed by hand")


if __name__ == "__main__":
    main()
