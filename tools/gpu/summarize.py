#!/usr/bin/env python3
"""Folds the GPU check's step outputs (tools/gpu/gpu_check.sh's raw folder) into one summary.json:
the device, each step's exit status and time, the ceiling, eaglevk next to llama.cpp per file
and test, the decode step as a fraction of the measured read bandwidth, the profiled round
costs, the tiny pair's speed-up, the layer split's cost of a hop, the kernel table's extremes,
the GPU tests, and each of issue 46's targets with whether it was met. Missing inputs (a step
cut short) leave their entries out and their targets "not measured"; nothing here invents a
figure.

Usage: summarize.py RAW_DIR SUMMARY.json BUDGET_SECONDS
"""
import json
import os
import re
import sys


def load_json(path):
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    # A program may print lines before its JSON (llama-bench's device lines on stdout): the
    # document starts at the first line that opens an array or an object.
    lines = text.splitlines(keepends=True)
    first = next((i for i, line in enumerate(lines) if line.rstrip() in ("[", "{") or line.startswith(("[{", "{\""))), None)
    if first is None:
        return None
    start = sum(len(line) for line in lines[:first])
    try:
        return json.loads(text[start:])
    except ValueError:
        return None


def eaglevk_tests(entries):
    """{test name: entry} of an `eaglevk bench -o json` array."""
    return {e.get("test"): e for e in entries or [] if isinstance(e, dict)}


def llama_tests(entries):
    """{"ppN" / "tgN" / "tgN @ dD": tokens/s} of a `llama-bench -o json` array."""
    out = {}
    for e in entries or []:
        depth = e.get("n_depth", 0)
        at = f" @ d{depth}" if depth else ""
        if e.get("n_prompt") and not e.get("n_gen"):
            out[f"pp{e['n_prompt']}{at}"] = e.get("avg_ts")
        elif e.get("n_gen") and not e.get("n_prompt"):
            out[f"tg{e['n_gen']}{at}"] = e.get("avg_ts")
    return out


def profile_of(entries, prefix):
    for name, e in eaglevk_tests(entries).items():
        if name and name.startswith("profile " + prefix):
            return e
    return None


def round_costs(entries, spec_prefix):
    """GPU ms of a decode step and of a speculative round (the profiled test named spec_prefix...:
    "profile spec-tg" for the chain, "profile spec-tree" for trees), from one `bench --profile` run."""
    tests = eaglevk_tests(entries)
    step = next((e for n, e in tests.items() if n and n.startswith("profile tg")), None)
    spec = next((e for n, e in tests.items() if n and n.startswith(spec_prefix)), None)
    if not step or not spec or not spec.get("rounds"):
        return None
    per_round = spec["tokens"] / spec["rounds"]
    round_ms = spec["gpu_ms_per_token"] * per_round
    top = sorted(spec.get("commands", []), key=lambda c: -c.get("gpu_ms_per_token", 0))[:12]

    # The profile names each command "SHADER OP": the draft's ops start with "draft", the tree's
    # building with "tree"; the rest is the target's verify pass (and the small transfers).
    def op(c):
        return c["command"].split(" ", 1)[-1]

    verify_ms = per_round * sum(c["gpu_ms_per_token"] for c in spec.get("commands", [])
                                if not op(c).startswith(("draft", "tree")) and not c["command"].startswith("transfer"))
    step_ms = step["gpu_ms_per_token"]
    return {
        "test": spec["test"],
        "decode_step_gpu_ms": step["gpu_ms_per_token"],
        "decode_step_commands": step.get("commands_per_token"),
        "round_gpu_ms": round_ms,
        "round_over_step": round_ms / step_ms if step_ms else None,
        "verify_gpu_ms": verify_ms,
        "verify_over_step": verify_ms / step_ms if step_ms else None,
        "host_record_ms_per_round": spec.get("host_record_ms_per_round"),
        "top_commands_per_token": [
            {"command": c["command"], "gpu_ms": c["gpu_ms_per_token"], "gb_per_s": c.get("gb_per_s", 0)} for c in top
        ],
    }


def best_gemm_configs(gemm_rows):
    """The prefill GEMM's question (kernel_table --gemm-variants): per type, matrix and row count,
    the fastest configuration of the coopmat GEMM's switches next to the device's choice, with
    each one's registers per lane (the compiler's statistics) where the driver gave them."""
    def config(k):
        return {"block": k["gemm_block"], "prefetch": k["gemm_prefetch"], "f16_inputs": k["gemm_f16_inputs"],
                "tile_k": k["gemm_tile_k"]}

    def registers(k):
        return (k.get("pipeline_statistics") or {}).get("Register Count")

    groups = {}
    for k in gemm_rows:
        if "gemm_block" in k:
            groups.setdefault(f"{k['type']} {k['matrix']} rows {k['rows']}", []).append(k)
    out = {}
    for key, ks in groups.items():
        default = next((k for k in ks if k.get("gemm_default")), None)
        if default is None or len(ks) < 2:
            continue  # no alternative timed (the run had no --gemm-variants)
        fastest = min(ks, key=lambda k: k["median_us"])
        out[key] = {"fastest": config(fastest), "fastest_us": round(fastest["median_us"], 2),
                    "fastest_tflop_per_s": round(fastest["tflop_per_s"], 2), "fastest_registers": registers(fastest),
                    "default": config(default), "default_us": round(default["median_us"], 2),
                    "default_registers": registers(default),
                    "speedup": round(default["median_us"] / fastest["median_us"], 3)}
    return out


def variants(raw):
    """The variant runs (gpu_check.sh's variants.tsv: NAME|ENV|MODEL|ARGS): each one's tokens/s per
    test, and its ratio to the default line (no ENV) with the same model and arguments; profiled
    runs add their round costs. Only what ran is listed."""
    try:
        with open(os.path.join(raw, "variants.tsv")) as f:
            lines = [line.rstrip("\n").split("|") for line in f if line.count("|") == 3]
    except OSError:
        return []
    out, defaults = [], {}
    for name, env, model, args in lines:
        entries = load_json(os.path.join(raw, f"variant_{name}.json"))
        if entries is None:
            continue
        tests = {t: e.get("tokens_per_s") for t, e in eaglevk_tests(entries).items()
                 if t and not t.startswith("profile") and t != "load"}
        v = {"name": name, "env": env, "model": model, "args": args, "tokens_per_s": tests}
        for kind, prefix in (("chain", "profile spec-tg"), ("tree", "profile spec-tree")):
            costs = round_costs(entries, prefix)
            if costs:
                v[f"profile_{kind}"] = {k: costs[k] for k in ("decode_step_gpu_ms", "round_gpu_ms", "round_over_step",
                                                               "verify_gpu_ms", "verify_over_step") if k in costs}
        if not env:
            defaults[(model, args)] = v
        out.append(v)
    for v in out:
        base = defaults.get((v["model"], v["args"]))
        if v["env"] and base:
            v["vs_default"] = {t: r / base["tokens_per_s"][t] for t, r in v["tokens_per_s"].items()
                               if r and base["tokens_per_s"].get(t)}
    return out


def split_test_shape(test, one):
    """(rows, tokens, taps) of one pass of an `eaglevk bench` test: its rows, the tokens it
    yields, and whether it carries the draft's taps: "ppN" prefills in passes of min(N, 512) rows (bench's max_rows), "tgN" decodes
    one row a pass, "spec-tgN ... k=K" verifies K + 1 rows a round and keeps its acceptance length
    (1 + accepted / drafts) of them. None for other tests (trees: not in the split step)."""
    m = re.match(r"pp(\d+)$", test)
    if m:
        rows = min(int(m.group(1)), 512)
        return rows, rows, False
    if re.match(r"tg\d+", test):
        return 1, 1, False
    m = re.match(r"spec-tg\d+.* k=(\d+)$", test)
    if m and one.get("mean_acceptance_length"):
        return int(m.group(1)) + 1, one["mean_acceptance_length"], True
    return None


def split(raw):
    """gpu_check.sh's split step: per part (split_NAME_one.json on one device, split_NAME_two.json
    on the same device opened twice, split_NAME_model.json its model's `inspect --json`), each
    test's tokens/s both ways, their ratio (two / one), and what one hop costs: (1/two - 1/one)
    seconds a token per device boundary, and that times the tokens a pass yields (a prefill's
    rows, a chain round's acceptance length) per pass. The bytes a hop carries come from the
    model's hidden size, not from the engine: rows x hidden x 4, rows x 4 hidden x 4 with the
    draft's three tap columns (engine::SplitFront). Only tests measured both ways are listed."""
    out = []
    names = sorted(f[len("split_"):-len("_one.json")] for f in os.listdir(raw)
                   if f.startswith("split_") and f.endswith("_one.json"))
    for name in names:
        one = eaglevk_tests(load_json(os.path.join(raw, f"split_{name}_one.json")))
        two = eaglevk_tests(load_json(os.path.join(raw, f"split_{name}_two.json")))
        model = load_json(os.path.join(raw, f"split_{name}_model.json")) or {}
        hidden = (model.get("config") or {}).get("hidden_size")
        boundaries = 1  # --devices 0,0
        for test, e in one.items():
            if not test or test.startswith("profile") or test == "load":
                continue
            a, b = e.get("tokens_per_s"), (two.get(test) or {}).get("tokens_per_s")
            if not a or not b:
                continue
            per_token_ms = (1 / b - 1 / a) * 1000 / boundaries
            # The spread of each side's repetitions: a hop on a GPU costs about 1% of an 8B decode step.
            t = {"part": name, "test": test, "one_device_tokens_per_s": a, "two_devices_tokens_per_s": b,
                 "one_device_stddev": e.get("stddev"), "two_devices_stddev": two[test].get("stddev"),
                 "two_over_one": b / a, "hop_ms_per_token": per_token_ms}
            shape = split_test_shape(test, e)
            if shape:
                rows, tokens, taps = shape
                t["rows_per_pass"] = rows
                t["tokens_per_pass"] = tokens
                t["hop_ms_per_pass"] = per_token_ms * tokens
                if hidden:
                    columns = 4 if taps else 1  # the hidden state, and the three tap layers' beside it
                    t["hop_bytes_per_pass"] = rows * columns * hidden * 4
                    t["hop_bytes_per_token"] = t["hop_bytes_per_pass"] / tokens
            out.append(t)
    return out


def main():
    raw, out_path, budget = sys.argv[1], sys.argv[2], float(sys.argv[3])
    s = {"budget_s": budget, "steps": [], "targets": []}
    try:
        with open(os.path.join(raw, "steps.tsv")) as f:
            for line in f:
                name, rc, seconds = line.rstrip("\n").split("\t")
                s["steps"].append({"step": name, "exit": rc, "seconds": int(seconds)})
    except OSError:
        pass
    try:
        with open(os.path.join(raw, "devices.txt")) as f:
            s["devices"] = f.read()[:3000]
    except OSError:
        pass

    table = load_json(os.path.join(raw, "kernel_table.json"))
    read_gbps = None
    if table:
        s["device"] = table.get("device")
        s["ceiling"] = table.get("ceiling")
        read_gbps = (table.get("ceiling") or {}).get("read_gb_per_s")
        kernels = [k for k in table.get("kernels", []) if k.get("kernel") == "matvec" and not k.get("shape_override")
                   and not k.get("rows_outs_override")]
        by_type = {}
        for k in kernels:
            by_type.setdefault(k["type"], []).append(k)
        s["matvec_by_type"] = {
            t: {
                "worst_fraction_of_read": min(k["fraction_of_read"] for k in ks),
                "best_fraction_of_read": max(k["fraction_of_read"] for k in ks),
                "one_row": {k["matrix"]: round(k["gb_per_s"], 1) for k in ks if k["rows"] == 1},
                # The compiler's statistics (registers a lane uses, spills) of the one-row kernels.
                "pipeline_statistics_one_row": {k["matrix"]: k.get("pipeline_statistics") for k in ks
                                                if k["rows"] == 1 and k.get("pipeline_statistics")},
            }
            for t, ks in by_type.items()
        }
        # The tuning question: which workgroup shape streams best per type and matrix at one row.
        best = {}
        for k in table.get("kernels", []):
            if k.get("kernel") != "matvec" or k["rows"] != 1:
                continue
            key = f"{k['type']} {k['matrix']}"
            if key not in best or k["gb_per_s"] > best[key]["gb_per_s"]:
                best[key] = {"workgroup": k["workgroup"], "outputs": k["outputs"], "gb_per_s": round(k["gb_per_s"], 1),
                             "default": not k.get("shape_override")}
        s["best_matvec_shape_one_row"] = best
        # The verify pass's question (kernel_table --rows-outs): which outputs per workgroup are
        # fastest per type, matrix and row count above one, next to the device's default.
        groups = {}
        for k in table.get("kernels", []):
            if k.get("kernel") != "matvec" or k["rows"] <= 1 or k.get("shape_override"):
                continue
            groups.setdefault(f"{k['type']} {k['matrix']} rows {k['rows']}", []).append(k)
        best_rows = {}
        for key, ks in groups.items():
            default = next((k for k in ks if not k.get("rows_outs_override")), None)
            if default is None or len(ks) < 2:
                continue  # no alternative timed (the run had no --rows-outs)
            fastest = min(ks, key=lambda k: k["median_us"])
            best_rows[key] = {"rows_outs": fastest["outputs"], "median_us": round(fastest["median_us"], 2),
                              "default_outputs": default["outputs"], "default_us": round(default["median_us"], 2),
                              "default": fastest is default}
        if best_rows:
            s["best_rows_outs"] = best_rows
        s["gemm"] = [k for k in table.get("kernels", []) if k.get("kernel", "").startswith("gemm")]
        best_gemm = best_gemm_configs(s["gemm"])
        if best_gemm:
            s["best_gemm"] = best_gemm
        s["kernel_table_truncated"] = table.get("truncated")

    s["bench"] = {}
    for name in ("q4_k_m", "f16", "q4_k_m_depth", "f16_depth"):
        ours = load_json(os.path.join(raw, f"eaglevk_{name}.json"))
        theirs = load_json(os.path.join(raw, f"llama_{name}.json"))
        if ours is None and theirs is None:
            continue
        tests = eaglevk_tests(ours)
        llama = llama_tests(theirs)
        entry = {"eaglevk": {}, "llama.cpp": llama, "ratio": {}}
        for test, e in tests.items():
            if not test or test.startswith("profile") or test == "load":
                continue
            entry["eaglevk"][test] = e.get("tokens_per_s")
            if test in llama and llama[test]:
                entry["ratio"][test] = e.get("tokens_per_s", 0) / llama[test]
            if test.startswith("tg") and read_gbps and e.get("size_bytes"):
                gbps = e["size_bytes"] * e["tokens_per_s"] / 1e9
                entry.setdefault("decode_weights_gb_per_s", {})[test] = gbps
                entry.setdefault("decode_fraction_of_read", {})[test] = gbps / read_gbps
            if "size_bytes" in e:
                entry["size_bytes"] = e["size_bytes"]
        s["bench"][name] = entry

    for name, prefix in (("chain", "profile spec-tg"), ("tree", "profile spec-tree"), ("scout", "profile spec-tg")):
        costs = round_costs(load_json(os.path.join(raw, f"profile_{name}.json")), prefix)
        if costs:
            s[f"profile_{name}"] = costs

    s["variants"] = variants(raw)
    s["split"] = split(raw)

    tiny = eaglevk_tests(load_json(os.path.join(raw, "tiny_pair_a.json")))
    tg = next((e for n, e in tiny.items() if n and n.startswith("tg")), None)
    spec = next((e for n, e in tiny.items() if n and n.startswith("spec-tg")), None)
    if tg and spec:
        s["tiny_pair_a"] = {"tg": tg["tokens_per_s"], "spec_tg": spec["tokens_per_s"],
                            "speedup": spec["tokens_per_s"] / tg["tokens_per_s"],
                            "acceptance_length": spec.get("mean_acceptance_length")}

    try:
        with open(os.path.join(raw, "tests.txt")) as f:
            s["tests"] = [line.rstrip("\n") for line in f if re.match(r"^\S+: exit", line)]
    except OSError:
        pass

    def target(name, value, op, bound):
        met = None if value is None else (value >= bound if op == ">=" else value <= bound)
        s["targets"].append({"target": f"{name} {op} {bound}", "value": value,
                             "met": "not measured" if met is None else met})

    def ratio(file, prefix):
        r = s["bench"].get(file, {}).get("ratio", {})
        return next((v for k, v in r.items() if k.startswith(prefix) and "@" not in k), None)

    def fraction(file):
        r = s["bench"].get(file, {}).get("decode_fraction_of_read", {})
        return next((v for k, v in r.items() if "@" not in k), None)

    target("Q4_K_M tg / llama.cpp", ratio("q4_k_m", "tg"), ">=", 1.10)
    target("F16 tg / llama.cpp", ratio("f16", "tg"), ">=", 1.10)
    target("Q4_K_M pp / llama.cpp", ratio("q4_k_m", "pp"), ">=", 1.0)
    target("F16 pp / llama.cpp", ratio("f16", "pp"), ">=", 1.0)
    target("F16 decode step, fraction of read bandwidth", fraction("f16"), ">=", 0.70)
    target("Q4_K_M decode step, fraction of read bandwidth", fraction("q4_k_m"), ">=", 0.50)
    target("k=3 chain round / decode step (GPU ms)", s.get("profile_chain", {}).get("round_over_step"), "<=", 1.35)
    target("tree verify pass / decode step (GPU ms)", s.get("profile_tree", {}).get("verify_over_step"), "<=", 2.0)
    target("tiny pair A spec-tg / tg", s.get("tiny_pair_a", {}).get("speedup"), ">=", 2.5)

    with open(out_path, "w") as f:
        json.dump(s, f, indent=1)
    for t in s["targets"]:
        v = t["value"]
        print(f"target {t['target']}: {'-' if v is None else round(v, 3)} ({t['met']})")


if __name__ == "__main__":
    main()
