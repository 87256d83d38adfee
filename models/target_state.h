#pragma once
// What every target model's forward shares: the per-sequence device state (KV cache, rope
// table, inputs, activations), the tap request and the description of one pass.
#include <cstdint>
#include <vector>

#include "runtime/ops/ops.h"
#include "runtime/vk/arena.h"

namespace eaglevk::models {

// The sizes a target's state is planned from.
struct TargetShape {
  uint32_t layers = 0, hidden = 0, heads = 0, kv_heads = 0, head_dim = 0, vocab = 0;
  uint32_t ffn_width = 0;      // the widest dense MLP (gate/up rows are twice this)
  uint32_t experts = 0;        // 0: no MoE layers
  uint32_t experts_per_token = 0;
  uint32_t expert_width = 0;   // each expert's intermediate size
  std::vector<float> rope_inv_freq;  // [head_dim / 2]
  bool temperature_tuning = false;   // needs a per-row query scale buffer
  // The layers of this device's part of a model split across devices (LayerRange): the KV
  // cache holds only these, and the staging buffers of the hops before and after are made.
  uint32_t first_layer = 0, end_layer = 0;  // end 0: every layer
};

// The most tap columns (of H each) a hop between devices carries: EAGLE-3's three.
constexpr uint32_t kMaxHopTaps = 3;

struct TargetState {
  uint32_t capacity = 0;  // positions the KV cache holds
  uint32_t max_rows = 0;  // rows one pass may carry
  // Rows of logits one pass may compute: max_rows, unless [max_rows, vocab] f32 would exceed
  // one storage binding (600 rows x 128,256 is 307 MB); long prefills need only the last row.
  // 0 for a part of a split model before the last: it ends in hidden_out, the last part holds
  // the final norm and lm_head, and out_norm and logits are none of its arena's tensors.
  uint32_t logits_rows = 0;
  uint32_t kv_dim = 0;
  // One allocation per layer ([capacity][nkv hd] f16 each): the whole cache of a long context
  // (8 GiB for an 8B model at 32k tokens) exceeds maxMemoryAllocationSize on every driver.
  // Layers outside this device's part of a split model keep empty buffers.
  std::vector<vk::Buffer> k_cache, v_cache;
  // A model split across devices: the residual stream of a pass's rows ([max_rows, H] f32)
  // and, when the pass takes taps, its tap rows ([max_rows, kMaxHopTaps H] f32, from byte
  // hop_taps_offset()) arrive in hidden_in (host-visible: the engine writes what the previous
  // device left in its hidden_out) and leave through hidden_out (host-visible, read by the
  // engine) when this part is not the first, resp. the last. Empty otherwise.
  vk::Buffer hidden_in, hidden_out;
  uint64_t hop_taps_offset() const;
  vk::Buffer rope_table;        // [capacity][hd / 2] (cos, sin)
  vk::Buffer ids, positions;    // int32 [max_rows]: the pass's inputs
  vk::Buffer out_ids;           // int32 [max_rows]: argmax (or sampled token) per logits row
  vk::Buffer accept;            // int32 [max_rows]: speculative acceptance flags
  vk::Buffer qscale;            // f32 [max_rows]: Llama-4 attention temperature (when tuned)
  vk::Buffer expert_ids;        // int32 [max_rows * experts_per_token] (MoE)
  vk::Buffer expert_rows;       // a prefill's rows by expert (ops::group_rows_by_expert; MoE)
  // Flash-decoding (ops::AttentionSplit): keys per split, 0 on CPU devices, and the partial
  // states' scratch.
  uint32_t split_keys = 0;
  vk::Buffer split_scratch;
  // The activations: tensor sizes from the shape, offsets planned from lifetimes that dry
  // recordings of the forward derive (models::make_target_state in models/target.h).
  vk::Arena arena;
  uint32_t x = 0, attn_norm = 0, qkv = 0, attn = 0, ffn_norm = 0, gate_up = 0, act = 0, out_norm = 0, logits = 0;
  uint32_t router = 0, expert_in = 0, expert_gate_up = 0, expert_act = 0;  // MoE only

  ops::KvLayer kv_layer(uint32_t layer) const;
};

// Everything but the arena's memory: its tensors are declared, not yet planned or allocated
// (models::make_target_state of a TargetModel does that from the model's forward).
TargetState make_target_state(const vk::Context& ctx, const TargetShape& shape, uint32_t capacity, uint32_t max_rows);

// Where the residual stream entering the listed layers goes: tap i of row r lands at
// columns [i H, (i + 1) H) of row r of `out`. A layer id equal to L taps the last layer's
// output before the final norm.
struct TapRequest {
  std::vector<uint32_t> layers;
  ops::Act out;
};

// Input rows whose embedding is an image feature row instead of embed_tokens[id] (the
// <|patch|> tokens of an image prompt): rows [pass_row, pass_row + rows) of the pass take rows
// [feature_row, feature_row + rows) of the features.
struct EmbeddingRun {
  uint32_t pass_row = 0, feature_row = 0, rows = 0;
};
struct EmbeddingOverride {
  ops::Act features;  // [*, hidden]
  std::vector<EmbeddingRun> runs;
};

struct ForwardPass {
  uint32_t rows = 0;         // positions in this pass (ids/positions hold them)
  uint32_t kv_len = 0;       // valid cache rows after this pass: last position + 1
  uint32_t logits_from = 0;  // logits and argmax for rows [logits_from, rows)
  bool batch_invariant = false;  // matrix-vector kernels at any row count (verify passes)
  const TapRequest* taps = nullptr;
  bool argmax = true;            // false when the caller samples the logits rows itself
  // Tree verification: the rows are tree nodes written to KV rows `slots` (not their
  // positions), each attending to the committed rows and its own ancestors (`tree`).
  // Slots without a tree: the rows belong to several sequences, each with its own range of
  // cache rows; slot = the range's first row + position (ops::AttentionParams::regions).
  const ops::TreePath* tree = nullptr;
  const ops::IntVec* slots = nullptr;
  const EmbeddingOverride* embeddings = nullptr;  // image features of a prompt pass
};

// Pieces every target's forward records the same way.
// x = embed_tokens[ids] for the pass's rows, then the image feature rows of pass.embeddings.
void record_input_embeddings(ops::OpContext& oc, const ForwardPass& pass, const TargetState& s,
                             const ops::WeightMatrix& embed, ops::Act x, uint32_t hidden);
// Copies the residual stream x into the tap columns of every requested tap at `layer`.
void record_taps(ops::OpContext& oc, const ForwardPass& pass, ops::Act x, uint32_t layer, uint32_t hidden);
// A model split across devices: copies the pass's rows of the residual stream from s.hidden_in
// into x (into_x), or from x into s.hidden_out; with pass.taps, their rows of every tap column
// too (a part after the first receives the columns its predecessors wrote and writes its own
// over the rest, so the block leaving the part before the last holds every earlier layer's).
void record_hidden_hop(ops::OpContext& oc, TargetState& s, const ForwardPass& pass, ops::Act x, uint32_t hidden,
                       bool into_x);
// Final norm, lm_head and argmax for rows [logits_from, rows) of x.
void record_logits(ops::OpContext& oc, TargetState& s, const ForwardPass& pass, ops::Act x, const vk::Buffer& norm,
                   const ops::WeightMatrix& lm_head, float eps);

}  // namespace eaglevk::models
