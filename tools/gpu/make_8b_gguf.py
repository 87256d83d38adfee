# Writes a random-weight F16 GGUF with the Llama-3.1-8B shape and the real Llama-3 tokenizer, laid
# out as llama.cpp's converter lays it out, so that eaglevk and llama.cpp can be timed on one file
# (not a model: its text is noise). TOKENIZER_DIR holds tokenizer.json and tokenizer_config.json.
#   PYTHONPATH=llama.cpp/gguf-py python3 make_8b_gguf.py OUT.gguf TOKENIZER_DIR LAYERS
import json, math, sys
import numpy as np
import gguf

out, tok_dir, layers = sys.argv[1], sys.argv[2], int(sys.argv[3])
H, I, heads, kv, hd, V = 4096, 14336, 32, 8, 128, 128256
tj = json.load(open(f"{tok_dir}/tokenizer.json"))
tc = json.load(open(f"{tok_dir}/tokenizer_config.json"))
vocab = tj["model"]["vocab"]
added = {t["id"]: t for t in tj["added_tokens"]}
tokens = [None] * V
for t, i in vocab.items(): tokens[i] = t
for i, t in added.items(): tokens[i] = t["content"]
types = [3 if (i in added and added[i].get("special")) else 1 for i in range(V)]
merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]

w = gguf.GGUFWriter(out, "llama")
w.add_name("Llama-3.1-8B shape, random weights")
w.add_block_count(layers); w.add_context_length(131072); w.add_embedding_length(H)
w.add_feed_forward_length(I); w.add_head_count(heads); w.add_head_count_kv(kv)
w.add_rope_freq_base(500000.0); w.add_layer_norm_rms_eps(1e-5); w.add_key_length(hd); w.add_value_length(hd)
w.add_file_type(gguf.LlamaFileType.MOSTLY_F16); w.add_vocab_size(V); w.add_rope_dimension_count(hd)
w.add_tokenizer_model("gpt2"); w.add_tokenizer_pre("llama-bpe"); w.add_token_list(tokens)
w.add_token_types(types); w.add_token_merges(merges); w.add_bos_token_id(128000); w.add_eos_token_id(128009)
w.add_add_bos_token(True)
if "chat_template" in tc: w.add_chat_template(tc["chat_template"])

# Llama-3.1 RoPE scaling factors (factor 8, low 1, high 4, original context 8192).
freqs = 1.0 / (500000.0 ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
lo_w, hi_w = 8192 / 1.0, 8192 / 4.0
f = []
for fr in freqs:
    wl = 2 * math.pi / fr
    if wl < hi_w: f.append(1.0)
    elif wl > lo_w: f.append(8.0)
    else:
        s = (8192 / wl - 1.0) / (4.0 - 1.0)
        f.append(1.0 / ((1 - s) / 8.0 + s))
w.add_tensor("rope_freqs.weight", np.array(f, dtype=np.float32))

rng = np.random.default_rng(1)
base = rng.random(1 << 26, dtype=np.float32) * 2 - 1  # 64 M values in [-1, 1)
pools = {}
def rnd(rows, cols):
    if cols not in pools: pools[cols] = (base / math.sqrt(cols)).astype(np.float16)
    pool, n = pools[cols], rows * cols
    a = np.empty(n, dtype=np.float16)
    off = int(rng.integers(0, 1 << 20))
    first = min(n, pool.size - off)
    a[:first] = pool[off:off + first]
    i = first
    while i < n:
        m = min(pool.size, n - i)
        a[i:i + m] = pool[:m]
        i += m
    return a.reshape(rows, cols)
w.add_tensor("token_embd.weight", rnd(V, H))
w.add_tensor("output_norm.weight", np.ones(H, dtype=np.float32))
w.add_tensor("output.weight", rnd(V, H))
for l in range(layers):
    p = f"blk.{l}."
    w.add_tensor(p + "attn_norm.weight", np.ones(H, dtype=np.float32))
    w.add_tensor(p + "ffn_norm.weight", np.ones(H, dtype=np.float32))
    w.add_tensor(p + "attn_q.weight", rnd(heads * hd, H))
    w.add_tensor(p + "attn_k.weight", rnd(kv * hd, H))
    w.add_tensor(p + "attn_v.weight", rnd(kv * hd, H))
    w.add_tensor(p + "attn_output.weight", rnd(H, heads * hd))
    w.add_tensor(p + "ffn_gate.weight", rnd(I, H))
    w.add_tensor(p + "ffn_up.weight", rnd(I, H))
    w.add_tensor(p + "ffn_down.weight", rnd(H, I))
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
print("wrote", out)
