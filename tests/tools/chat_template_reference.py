#!/usr/bin/env python3
"""Chat templates rendered by eaglevk's Jinja engine against Jinja itself.

Every template under --data (*.jinja) and the tiny models' tokenizer_config.json templates
(--assets) is rendered over every conversation in conversations.json, and the small templates of
snippets.json (the rest of the supported subset) over two of them, with and without the
generation prompt, by jinja2 under the settings transformers' apply_chat_template uses
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loop controls, its tojson,
raise_exception and strftime_now) and by eaglevk_render_template (--renderer). The two must be
byte for byte equal, or both must fail. Then mutated templates (edited role headers and markers,
a changed default system prompt and date, toggled whitespace control, edited string literals,
swapped filters) are compared the same way, from a fixed seed: the mutations are the templates
that recognising a template by its shape got wrong. A mutation that eaglevk refuses by name
(a construct it does not render) is counted, not failed; a published template must never be
refused.
"""
import argparse
import datetime
import json
import pathlib
import random
import subprocess
import sys

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

NOW = [2025, 3, 7, 14, 5, 9]
BOS = "<|begin_of_text|>"
EOS = "<|eot_id|>"
REFUSAL_MARKERS = ("eaglevk does not render", "not rendered by eaglevk", "not one eaglevk renders",
                   "not a statement eaglevk renders", "eaglevk does not read")


def hf_environment(now):
    """The environment transformers compiles chat templates in."""

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return now.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def template_messages(messages):
    """Messages as the engine hands them over: an image part is {"type": "image"} (its path is for
    the image loader, not the template)."""
    out = []
    for m in messages:
        m = dict(m)
        if isinstance(m.get("content"), list):
            m["content"] = [{"type": "image"} if p.get("type") == "image" else p for p in m["content"]]
        out.append(m)
    return out


def reference(case):
    env = hf_environment(datetime.datetime(*case["now"]))
    kwargs = {"messages": template_messages(case["messages"]), "tools": case.get("tools"), "documents": None,
              "add_generation_prompt": case["add_generation_prompt"]}
    if case.get("bos_token"):
        kwargs["bos_token"] = case["bos_token"]
    if case.get("eos_token"):
        kwargs["eos_token"] = case["eos_token"]
    kwargs.update(case.get("variables") or {})
    try:
        return {"text": env.from_string(case["template"]).render(**kwargs)}
    except Exception as e:  # any failure of Jinja's is a failure the engine must also report
        return {"error": f"{type(e).__name__}: {e}"}


def engine(renderer, cases):
    lines = "".join(json.dumps(c, ensure_ascii=False) + "\n" for c in cases)
    run = subprocess.run([renderer], input=lines.encode(), stdout=subprocess.PIPE, check=True, timeout=600)
    results = [json.loads(line) for line in run.stdout.decode().splitlines()]
    if len(results) != len(cases):
        sys.exit(f"{renderer} answered {len(results)} of {len(cases)} cases")
    return results


def templates(data, assets):
    out = [(p.name, p.read_text(encoding="utf-8"), BOS, EOS) for p in sorted(data.glob("*.jinja"))]
    for model in ("tiny-llama3", "tiny-llama4-vision"):
        config = json.loads((assets / model / "tokenizer_config.json").read_text(encoding="utf-8"))
        bos = config.get("bos_token")
        bos = bos.get("content") if isinstance(bos, dict) else bos
        eos = config.get("eos_token")
        eos = eos.get("content") if isinstance(eos, dict) else eos
        out.append((f"{model}/tokenizer_config.json", config["chat_template"], bos or "", eos or ""))
    return out


def cases_for(name, template, bos, eos, conversations):
    for conv in conversations:
        for gen in (True, False):
            yield {"name": f"{name} × {conv['name']} × add_generation_prompt={gen}", "template": template,
                   "bos_token": bos, "eos_token": eos, "messages": conv["messages"], "tools": conv.get("tools"),
                   "variables": conv.get("variables", {}), "add_generation_prompt": gen, "now": NOW}


# Edits of the kind a fine-tune makes to a published template.
FIXED_EDITS = [
    ("<|start_header_id|>", "<|im_start|>"), ("<|end_header_id|>", "<|im_sep|>"), ("<|eot_id|>", "<|end|>\n"),
    ("<|header_start|>", "[[", ), ("<|header_end|>", "]]"), ("<|eot|>", "</s>"),
    ('{%- set system_message = "" %}', '{%- set system_message = "You are a pirate. Answer in pirate speak." %}'),
    ('"26 Jul 2024"', '"01 Jan 2030"'), ("Cutting Knowledge Date: December 2023", "Cutting Knowledge Date: June 2025"),
    ('strftime_now("%d %b %Y")', 'strftime_now("%Y-%m-%d %H:%M (%A)")'), ("|trim", "|upper"), ("| trim", "| length"),
    ("tojson(indent=4)", "tojson(indent=2)"), ("tojson(indent=4)", "tojson"), ("'<|image|>'", "'<image>' ~ loop.index"),
    ("messages[1:]", "messages[1:][::-1]"), ("message['role']", "message['role'] | replace('assistant', 'model')"),
]
WEIRD = ["é", "👋", "\\t", "\\n", "\\u00e9", "\\x41", "'", '"', "\\\\", " ", "\n", "{", "}", "%", "#"]


def random_edit(template, rng):
    kind = rng.randrange(5)
    if kind == 0:  # toggle whitespace control at one tag edge
        spots = [i for i in range(len(template) - 1) if template[i:i + 2] in ("{%", "{{", "%}", "}}", "{#", "#}")]
        if not spots:
            return template
        i = rng.choice(spots)
        opening = template[i] == "{"
        if opening:
            if template[i + 2:i + 3] in ("-", "+"):
                return template[:i + 2] + template[i + 3:]
            return template[:i + 2] + rng.choice("-+") + template[i + 2:]
        if i > 0 and template[i - 1] in "-+":
            return template[:i - 1] + template[i:]
        return template[:i] + ("-" if template[i] != "%" or rng.random() < 0.5 else "+") + template[i:]
    if kind == 1:  # whitespace where lstrip_blocks and trim_blocks act
        spots = [i for i in range(len(template)) if template.startswith(("{%", "{{", "%}", "\n"), i)]
        if not spots:
            return template
        i = rng.choice(spots)
        return template[:i] + rng.choice([" ", "\t", "  \n", "\n", " \n  "]) + template[i:]
    if kind == 2:  # edit inside a string literal
        quotes = [i for i, c in enumerate(template) if c in "'\"" and template[i - 1:i] != "\\"]
        if not quotes:
            return template
        i = rng.choice(quotes) + 1
        text = rng.choice(WEIRD)
        if text in ("'", '"', "\\\\"[:1]):
            text = "\\" + text
        return template[:i] + text + template[i:]
    if kind == 3:  # text outside tags
        i = rng.randrange(len(template) + 1)
        return template[:i] + rng.choice(["x", "é", "\n", " ", "—"]) + template[i:]
    a, b = rng.choice(FIXED_EDITS)
    return template.replace(a, b)


def compare(cases, results, refs):
    failures, refusals, both_failed = [], 0, 0
    for case, got, want in zip(cases, results, refs):
        if "text" in want and "text" in got:
            if got["text"] != want["text"]:
                at = next((k for k, (x, y) in enumerate(zip(got["text"], want["text"])) if x != y),
                          min(len(got["text"]), len(want["text"])))
                failures.append(f"{case['name']}: differs at character {at}:\n  jinja2:  {want['text'][max(0, at - 40):at + 40]!r}\n"
                                f"  eaglevk: {got['text'][max(0, at - 40):at + 40]!r}")
        elif "error" in want and "error" in got:
            both_failed += 1
        elif "error" in got and any(m in got["error"] for m in REFUSAL_MARKERS) and case.get("mutated"):
            refusals += 1
        else:
            failures.append(f"{case['name']}:\n  jinja2:  {str(want)[:300]}\n  eaglevk: {str(got)[:300]}")
    return failures, refusals, both_failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--renderer", required=True)
    ap.add_argument("--data", required=True, type=pathlib.Path)
    ap.add_argument("--assets", required=True, type=pathlib.Path)
    ap.add_argument("--mutations", type=int, default=400, help="mutated templates (each over a few conversations)")
    ap.add_argument("--seed", type=int, default=45)
    args = ap.parse_args()

    conversations = json.loads((args.data / "conversations.json").read_text(encoding="utf-8"))
    published = templates(args.data, args.assets)
    cases = [c for t in published for c in cases_for(*t, conversations)]
    # Small templates that exercise the rest of the subset (loops, filters, tests, methods,
    # macros, namespaces, whitespace control, literals), each over two conversations.
    snippets = json.loads((args.data / "snippets.json").read_text(encoding="utf-8"))
    for k, snippet in enumerate(snippets):
        cases += cases_for(f"snippet {k}", snippet, BOS, EOS, conversations[2:4])

    rng = random.Random(args.seed)
    for k in range(args.mutations):
        name, template, bos, eos = rng.choice(published)
        edits = []
        for _ in range(rng.randint(1, 4)):
            template = random_edit(template, rng)
        for conv in rng.sample(conversations, 3):
            for case in cases_for(f"mutation {k} of {name}", template, bos, eos, [conv]):
                case["mutated"] = True
                cases.append(case)

    results = engine(args.renderer, cases)
    refs = [reference(c) for c in cases]
    failures, refusals, both_failed = compare(cases, results, refs)
    snippet_cases = [(c, r) for c, r in zip(cases, refs) if c["name"].startswith("snippet ")]
    published_count = sum(1 for c in cases if not c.get("mutated")) - len(snippet_cases)
    rendered = sum(1 for c, r in zip(cases, refs) if "text" in r and not c.get("mutated")) - \
        sum(1 for c, r in snippet_cases if "text" in r)
    print(f"{len(snippets)} snippets: {len(snippet_cases)} cases, {sum(1 for _, r in snippet_cases if 'text' in r)} "
          "rendered by jinja2")
    print(f"{len(published)} templates × {len(conversations)} conversations × 2: {published_count} cases "
          f"({rendered} rendered by jinja2, the rest fail in both); {sum(1 for c in cases if c.get('mutated'))} mutated-template "
          f"cases; {both_failed} fail in both, {refusals} mutations refused by name; {len(failures)} disagree")
    for f in failures[:40]:
        print(f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
