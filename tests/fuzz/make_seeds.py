#!/usr/bin/env python3
"""Writes the small hand-made seeds of tests/fuzz/seeds/ from the bundled assets (run it from the
repository root when the assets change; the outputs are committed). The run script adds the
assets themselves (configs, tokenizer.json, prompts) to each corpus at run time.

- safetensors/: each tiny model's header with every tensor shrunk to a few elements (the real
  data is megabytes; libFuzzer mutates small inputs far faster), an index for two shards, and
  small files with each FP8 and 4-bit layout's tensors;
- tokenizer/: a byte-level tokenizer.json cut down to the 256 byte symbols, 40 merges and the
  special tokens (mode byte 0: the input is a tokenizer.json);
- config/: the EAGLE-3 layouts the assets do not show (ModelOpt eagle_config ids) and the FP8
  quantization_config layouts (compressed-tensors, fp8 blocks);
- chat_template/: the Llama-3.1 and first-release template styles (mode byte 0) and two
  conversations in Hugging Face messages JSON (mode byte 1).
"""
import json
import struct
from pathlib import Path

root = Path(__file__).resolve().parents[2]
seeds = root / "tests/fuzz/seeds"


def write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data if isinstance(data, bytes) else data.encode())


def shrunk_safetensors(src):
    raw = src.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    sizes = {"F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "BOOL": 1, "U8": 1}
    offset, out = 0, {}
    for name, entry in header.items():
        if name == "__metadata__":
            out[name] = entry
            continue
        shape = [min(d, 2) for d in entry["shape"]]
        count = 1
        for d in shape:
            count *= d
        size = count * sizes[entry["dtype"]]
        out[name] = {"dtype": entry["dtype"], "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(out, separators=(",", ":")).encode()
    return struct.pack("<Q", len(text)) + text + bytes(offset)


for model in ["tiny-llama3", "tiny-llama3-eagle3", "tiny-llama4"]:
    write(seeds / "safetensors" / f"{model}.safetensors", shrunk_safetensors(root / "assets" / model / "model.safetensors"))


def small_safetensors(tensors):
    """A file of (name, dtype, shape, bytes) tensors."""
    offset, out, blob = 0, {}, b""
    for name, dtype, shape, data in tensors:
        out[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blob += data
    text = json.dumps(out, separators=(",", ":")).encode()
    return struct.pack("<Q", len(text)) + text + blob


# The quantized layouts (loader/fp8.h, loader/int4.h), 8 outputs x 64 inputs, groups of 32: an FP8
# weight with per-row scales and one with 64 x 32 blocks; GPTQ, AWQ and compressed-tensors parts.
codes = bytes((i * 37) % 256 & 0xF7 for i in range(8 * 64))
words = lambda n: struct.pack(f"<{n}I", *[(0x89ABCDEF * (i + 1)) & 0xFFFFFFFF for i in range(n)])
half = lambda n: struct.pack(f"<{n}H", *[0x2000 + i for i in range(n)])
layouts = {
    "fp8": [("fp8.weight", "F8_E4M3", [8, 64], codes),
            ("fp8.weight_scale", "F32", [8, 1], struct.pack("<8f", *[0.01 * (i + 1) for i in range(8)])),
            ("blk.weight", "F8_E4M3", [8, 64], codes), ("blk.weight_scale", "BF16", [1, 2], half(2))],
    "gptq": [("gptq.qweight", "I32", [8, 8], words(64)), ("gptq.qzeros", "I32", [2, 1], words(2)),
             ("gptq.scales", "F16", [2, 8], half(16)), ("gptq.g_idx", "I32", [64], struct.pack("<64i", *[i // 32 for i in range(64)]))],
    "awq": [("awq.qweight", "I32", [64, 1], words(64)), ("awq.qzeros", "I32", [2, 1], words(2)), ("awq.scales", "F16", [2, 8], half(16))],
    "packed": [("ct.weight_packed", "I32", [8, 8], words(64)), ("ct.weight_scale", "BF16", [8, 2], half(16)),
               ("ct.weight_zero_point", "I32", [1, 2], words(2)), ("ct.weight_shape", "I64", [2], struct.pack("<2q", 8, 64))],
}
for name, tensors in layouts.items():
    write(seeds / "safetensors" / f"quantized-{name}.safetensors", small_safetensors(tensors))
names = list(json.loads((root / "assets/tiny-llama3/model.safetensors").read_bytes()[8:8136 + 8]).keys())[:12]
index = {"metadata": {"total_size": 123456}, "weight_map": {n: f"model-0000{i % 2 + 1}-of-00002.safetensors" for i, n in enumerate(names)}}
write(seeds / "safetensors" / "model.safetensors.index.json", json.dumps(index, indent=2))

tok = json.loads((root / "assets/tiny-llama3/tokenizer.json").read_text())
vocab = {k: v for k, v in tok["model"]["vocab"].items() if v < 256}
merges = []
for m in tok["model"]["merges"]:
    a, b = m.split(" ") if isinstance(m, str) else m
    if a in vocab and b in vocab and len(merges) < 40:
        vocab[a + b] = 256 + len(merges)
        merges.append(f"{a} {b}")
tok["model"]["vocab"], tok["model"]["merges"] = vocab, merges
for i, t in enumerate(tok["added_tokens"]):
    t["id"] = 256 + len(merges) + i
tok["post_processor"]["processors"][1]["special_tokens"]["<|begin_of_text|>"]["ids"] = [tok["added_tokens"][0]["id"]]
write(seeds / "tokenizer" / "small-tokenizer.json", b"\x00" + json.dumps(tok, ensure_ascii=False).encode())
write(seeds / "tokenizer" / "text-invalid-utf8", b"\x01caf\xc3\xa9 \xe2\x82 <|begin_of_text|>\xf0\x9f\x98 x\xff")

draft = json.loads((root / "assets/tiny-llama3-eagle3/config.json").read_text())
draft["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [1, 23, 44], "use_aux_hidden_state": True}
write(seeds / "config" / "eagle3-modelopt.json", json.dumps(draft, indent=2))

target = json.loads((root / "assets/tiny-llama3/config.json").read_text())
target["quantization_config"] = {
    "quant_method": "compressed-tensors", "format": "float-quantized", "ignore": ["lm_head"],
    "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
        "num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128]}}}}
write(seeds / "config" / "fp8-compressed-tensors.json", json.dumps(target, indent=2))
target["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}
write(seeds / "config" / "fp8-blocks.json", json.dumps(target, indent=2))

write(seeds / "chat_template" / "llama31-style.jinja",
      b"\x00{{- bos_token }}{%- set date_string = \"26 Jul 2024\" %}{%- if messages[0]['role'] == 'system' %}"
      b"{%- set system_message = messages[0]['content']|trim %}{%- endif %}"
      b"{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}{{- \"Cutting Knowledge Date: December 2023\\n\" }}"
      b"{{- \"Today Date: \" + date_string + \"\\n\\n\" }}{{- system_message }}{{- \"<|eot_id|>\" }}"
      b"{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ "
      b"message['content'] | trim + '<|eot_id|>' }}{%- endfor %}{%- if add_generation_prompt %}"
      b"{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}")
write(seeds / "chat_template" / "first-release.jinja",
      b"\x00{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
      b"message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 "
      b"%}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{{ "
      b"'<|start_header_id|>assistant<|end_header_id|>\n\n' }}")
write(seeds / "chat_template" / "messages.json",
      b"\x01" + json.dumps([{"role": "system", "content": "  Be brief.\n"}, {"role": "user", "content": "Hi \u00e9\u6771"},
                            {"role": "assistant", "content": "Hello."}]).encode())
write(seeds / "chat_template" / "messages-parts.json",
      b"\x01" + json.dumps([{"role": "user", "content": [{"type": "image", "image": "cat.png"},
                                                          {"type": "text", "text": " What is this? "}]}]).encode())
