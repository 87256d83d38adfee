#pragma once
// Llama-3 (LlamaForCausalLM): config, weights on the device, per-sequence state and a forward
// that records one pass for a batch of positions.
#include <cstdint>
#include <filesystem>
#include <vector>

#include "loader/hf_config.h"
#include "models/weight_loading.h"
#include "runtime/ops/ops.h"
#include "runtime/vk/arena.h"

namespace eaglevk::models {

struct Llama3Layer {
  vk::Buffer attn_norm;  // [H] f32
  DeviceMatrix qkv;      // [(nh + 2 nkv) hd, H]: q_proj | k_proj | v_proj rows
  DeviceMatrix o;        // [H, nh hd]
  vk::Buffer ffn_norm;   // [H] f32
  DeviceMatrix gate_up;  // [2 I, H]: gate_proj | up_proj rows
  DeviceMatrix down;     // [H, I]
};

struct Llama3Model {
  loader::LlamaConfig config;
  DeviceMatrix embed;       // [V, H]
  std::vector<Llama3Layer> layers;
  vk::Buffer norm;          // [H] f32
  DeviceMatrix lm_head;     // [V, H]; empty buffer when tied to embed
  ops::WeightMatrix lm_head_matrix() const { return lm_head.buffer ? lm_head.matrix() : embed.matrix(); }
  uint64_t weight_bytes = 0;
  uint64_t parameters = 0;
};

Llama3Model load_llama3(const vk::Context& ctx, const std::filesystem::path& dir);

// Device state of one sequence: KV cache, rope table, inputs, activations.
struct Llama3State {
  uint32_t capacity = 0;  // positions the KV cache holds
  uint32_t max_rows = 0;  // rows one pass may carry
  vk::Buffer k_cache, v_cache;  // [L][capacity][nkv hd] f16
  vk::Buffer rope_table;        // [capacity][hd / 2] (cos, sin)
  vk::Buffer ids, positions;    // int32 [max_rows]: the pass's inputs
  vk::Buffer out_ids;           // int32 [max_rows]: argmax per logits row
  vk::Arena arena;
  uint32_t x = 0, attn_norm = 0, qkv = 0, attn = 0, ffn_norm = 0, gate_up = 0, act = 0, out_norm = 0, logits = 0;

  ops::KvLayer kv_layer(const Llama3Model& m, uint32_t layer) const;
};

Llama3State make_llama3_state(const vk::Context& ctx, const Llama3Model& m, uint32_t capacity, uint32_t max_rows,
                              bool arena_reuse);

// Where the residual stream entering the listed layers goes: tap i of row r lands at
// columns [i H, (i + 1) H) of row r of `out`. A layer id equal to L taps the last layer's
// output before the final norm.
struct TapRequest {
  std::vector<uint32_t> layers;
  ops::Act out;
};

struct ForwardPass {
  uint32_t rows = 0;         // positions in this pass (ids/positions hold them)
  uint32_t kv_len = 0;       // valid cache rows after this pass: last position + 1
  uint32_t logits_from = 0;  // logits and argmax for rows [logits_from, rows)
  bool batch_invariant = false;  // matrix-vector kernels at any row count (verify passes)
  const TapRequest* taps = nullptr;
};

// Records the pass. Logits row i (of rows - logits_from) lands in arena[logits] row i and
// its argmax in out_ids[i].
void record_llama3_forward(ops::OpContext& oc, const Llama3Model& m, Llama3State& s, const ForwardPass& pass);

}  // namespace eaglevk::models
