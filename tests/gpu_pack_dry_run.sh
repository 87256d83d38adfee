#!/usr/bin/env bash
# The GPU check's dry run on lavapipe (docs/gpu-check.md): makes the pack as a loan would
# (tools/gpu/pack.sh, without llama.cpp's tools, which CI has no time to build), unpacks it into a
# fresh folder and runs its gpu_check.sh there with --lavapipe, then checks what came out: the pack
# fits what may travel, every step ran and succeeded, at most 8 files come back, and the summary
# holds the figures a GPU run must give (the ceiling, the kernel table, eaglevk's bench on the
# synthetic GGUF, the profiled rounds, the tiny pair's speed-up, the layer split's hop, the GPU
# tests). So the GPU check cannot rot between loans.
#   gpu_pack_dry_run.sh BUILD_DIR
set -euo pipefail
BUILD=$(cd "$1" && pwd)
cd "$(dirname "$0")/.."
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
bash tools/gpu/pack.sh --build "$BUILD" --out "$TMP/pack.tar.xz" --no-llama --lavapipe --prebuilt > "$TMP/instructions.txt"
grep -q "gpu_check.sh --budget" "$TMP/instructions.txt" || { echo "pack.sh printed no GPU call"; cat "$TMP/instructions.txt"; exit 1; }
mkdir "$TMP/unpacked" "$TMP/out" "$TMP/work"
tar -xJf "$TMP/pack.tar.xz" -C "$TMP/unpacked"
# The unpacked pack alone: no build folder on the PATH, a working folder of its own.
(cd "$TMP" && OUT="$TMP/out" WORK="$TMP/work" bash "$TMP/unpacked/gpu_check.sh" --lavapipe --budget 420 --steps all) > "$TMP/run.txt" 2>&1 ||
  { tail -60 "$TMP/run.txt"; echo "gpu_check.sh failed"; exit 1; }
python3 - "$TMP/pack.tar.xz" "$TMP/out" <<'EOF'
import json, os, sys
pack, out = sys.argv[1], sys.argv[2]
errors = []
size = os.path.getsize(pack)
if size > 56 << 20:
    errors.append(f"the pack is {size >> 20} MiB, over 56 MiB")
files = [os.path.join(d, f) for d, _, fs in os.walk(out) for f in fs]
if len(files) > 8:
    errors.append(f"{len(files)} files come back, more than 8: {files}")
s = json.load(open(os.path.join(out, "summary.json")))
for step in s["steps"]:
    if step["exit"] != "0":
        errors.append(f"step {step['step']} exited {step['exit']}")
names = {step["step"] for step in s["steps"]}
for want in ("devices", "kernel_table", "files", "eaglevk_q4_k_m", "eaglevk_f16", "eaglevk_f16_depth",
             "profile_chain", "profile_tree", "split_plain_two", "split_chain_two", "tiny_pair_a"):
    # No Q4_K_M file without llama-quantize: its bench is the one step a dry run cannot take.
    if want not in names and want != "eaglevk_q4_k_m":
        errors.append(f"step {want} did not run")
ceiling = s.get("ceiling") or {}
if not ceiling.get("read_gb_per_s") or not ceiling.get("copy_gb_per_s"):
    errors.append(f"no ceiling: {ceiling}")
if not s.get("matvec_by_type") or not s.get("gemm"):
    errors.append("no kernel table")
f16 = s.get("bench", {}).get("f16", {})
if not any(k.startswith("tg") for k in f16.get("eaglevk", {})) or not f16.get("decode_fraction_of_read"):
    errors.append(f"no F16 decode figure: {f16}")
for p in ("profile_chain", "profile_tree"):
    if not (s.get(p) or {}).get("round_over_step"):
        errors.append(f"no {p} round cost")
if not (s.get("tiny_pair_a") or {}).get("speedup"):
    errors.append("no tiny pair A speed-up")
tests = s.get("tests", [])
if len(tests) < 5 or any(", 0 failed" not in t or "exit 0" not in t for t in tests):
    errors.append(f"GPU tests: {tests}")
# The variants (tools/gpu/variants.txt) on the files a dry run has: each beside its default.
variants = {v["name"]: v for v in s.get("variants", [])}
for want in ("chain", "chain_rows_outs8", "tg_f16", "tg_f16_fold_norms"):
    v = variants.get(want)
    if not v or not v.get("tokens_per_s"):
        errors.append(f"variant {want} gave no figure: {v}")
    elif v["env"] and not v.get("vs_default"):
        errors.append(f"variant {want} has no ratio to its default: {v}")
if not (variants.get("chain") or {}).get("profile_chain"):
    errors.append("the profiled chain variant gave no round cost")
# The layer split's hop (one device against --devices 0,0): the small F16 file's prefill and
# decode, the tiny pair's chain, each with both figures, their ratio, the hop's ms and bytes.
split = {(t["part"], t["test"].split(" ")[0]): t for t in s.get("split", [])}
for want in (("plain", "pp64"), ("plain", "tg64"), ("chain", "spec-tg32")):
    t = split.get(want) or {}
    if not all(isinstance(t.get(k), (int, float)) for k in ("one_device_tokens_per_s", "two_devices_tokens_per_s",
                                                             "two_over_one", "hop_ms_per_pass", "hop_bytes_per_token")):
        errors.append(f"split {want} gave no figures: {t}")
if not os.path.exists(os.path.join(out, "raw.tar.gz")):
    errors.append("raw.tar.gz did not come back")
if not s["targets"]:
    errors.append("no targets")
if errors:
    print("\n".join(errors))
    sys.exit(1)
print(f"dry run: pack {size >> 10} KiB, {len(files)} files back, {len(s['steps'])} steps, tests: {tests}")
EOF
