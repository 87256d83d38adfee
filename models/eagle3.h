#pragma once
// The EAGLE-3 draft head: one decoder layer over [norm(embedding), norm(feature)], where the
// feature is fc(three target taps) for verified positions and the head's own pre-norm
// output for speculative ones. Loaded from the original EAGLE-3 layout (`midlayer.*`) or the
// speculators layout (`layers.0.*`) into one canonical struct.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "loader/eagle3_config.h"
#include "loader/hf_config.h"
#include "loader/model_files.h"
#include "models/llama3.h"
#include "models/weight_loading.h"
#include "runtime/ops/ops.h"
#include "runtime/vk/arena.h"

namespace eaglevk::models {

// The config reading lives in the loader (loader/eagle3_config.h says how tap ids are read per
// source format), so that it is tested and fuzzed without Vulkan.
using loader::Eagle3Config;
// parse_eagle3_config on files.config, naming config.json (or the GGUF file) in errors.
Eagle3Config load_eagle3_config(const loader::ModelFiles& files);

// The family default: (2, L/2, L-3).
std::vector<uint32_t> default_aux_layers(uint32_t target_layers);

struct Eagle3Model {
  Eagle3Config config;
  DeviceMatrix fc;             // [H, 3 Ht]
  vk::Buffer in_norm;          // [H] f32, on the token embedding
  vk::Buffer hidden_norm;      // [H] f32, on the feature
  DeviceMatrix qkv;            // [(nh + 2 nkv) hd, 2 H]
  DeviceMatrix o;              // [H, nh hd]
  vk::Buffer post_norm;        // [H] f32
  DeviceMatrix gate_up;        // [2 I, H]
  DeviceMatrix down;           // [H, I]
  vk::Buffer final_norm;       // [H] f32
  DeviceMatrix lm_head;        // [Vd, H]; empty when the head uses the target's (GGUF without output.weight)
  DeviceMatrix embed;          // [V, H] when the head ships its own; else empty (target's is used)
  vk::Buffer d2t;              // int32 [Vd] offsets: target id = draft id + d2t[draft id]; empty = identity
  std::vector<uint32_t> aux_layers;  // the tap ids in use, ascending
  bool aux_layers_default = true;
};

// Loads the head (a folder or a GGUF file) and checks it against the target: hidden sizes,
// vocabulary, tap ids. `aux_override` (from --aux-layers) wins over the config and the default.
Eagle3Model load_eagle3(const vk::Context& ctx, const std::filesystem::path& path, const loader::LlamaConfig& target,
                        const std::vector<uint32_t>& aux_override = {});

// The target weights a head may share: the token embedding (heads without their own) and the
// lm_head (GGUF heads without output.weight).
struct TargetWeights {
  ops::WeightMatrix embed, lm_head;
};

// Device state of the draft for one sequence: its own KV cache, rope table and activations.
struct Eagle3State {
  uint32_t capacity = 0, max_rows = 0;
  uint32_t logit_rows = 1;       // rows whose logits one pass computes (tree steps: K)
  vk::Buffer k_cache, v_cache;   // [capacity][nkv hd] f16
  vk::Buffer rope_table;
  vk::Buffer positions;          // int32 [max_rows + k]: catch-up rows, then one per draft step
  vk::Arena arena;
  uint32_t feature = 0, embedded = 0, attn_in = 0, qkv = 0, attn = 0, ffn_norm = 0, gate_up = 0, act = 0, out_norm = 0,
           logits = 0;
  uint32_t proposing = 0;        // [logit_rows, H]: a batched catch-up's proposing rows
  uint32_t split_keys = 0;       // flash-decoding (ops::AttentionSplit), 0 on CPU devices
  vk::Buffer split_scratch;
  ops::KvLayer kv() const;
};

// `capacity` includes any scratch rows of tree steps; `logit_rows` is 1 for the chain, the
// number of sequences for batched chains. The arena's lifetimes are derived from dry
// recordings of the head's forward (derive_eagle3_arena).
Eagle3State make_eagle3_state(ops::Gpu& gpu, const Eagle3Model& m, uint32_t capacity, uint32_t max_rows,
                              uint32_t max_steps, bool arena_reuse, uint32_t logit_rows = 1);
// Records every kind of draft pass the engine runs (catch-up, step, tree step, several
// sequences; short and full context; both paths) dry into s, its arena as it is laid out, with
// dry stand-ins for the pass's inputs, and returns what each touched.
std::vector<vk::CommandLog> record_eagle3_arena_passes(ops::Gpu& gpu, const Eagle3Model& m, Eagle3State& s);
// Lays s's arena out dry and derives its tensors' conflicts from those recordings.
void derive_eagle3_arena(ops::Gpu& gpu, const Eagle3Model& m, Eagle3State& s);
// The bytes make_eagle3_state's arena takes (one sequence), for memory planning; m may be a dry
// load (vk::DryAllocations).
uint64_t eagle3_arena_bytes(ops::Gpu& gpu, const Eagle3Model& m, uint32_t max_rows, bool arena_reuse);

// One draft forward over `rows` rows.
//   catch-up (from_taps): feature = fc(taps rows), tokens from `ids`;
//   later steps: rows == 1, feature = the previous step's pre-norm output (row `feature_row`
//   of the feature buffer), token = the previous draft token.
// Writes the draft argmax of the last row, mapped to the target vocabulary, at `out_token`.
//   tree steps (tree set): `rows` frontier nodes at once; see DraftTreeStep.
struct DraftTreeStep {
  ops::Act u_history;          // pre-norm outputs of earlier rows (row 0: the catch-up's last)
  uint32_t history_rows = 0;
  ops::IntVec gather;          // feature row r = u_history row gather[r]
  ops::IntVec slots;           // KV cache rows the nodes write (scratch rows past the committed)
  ops::TreePath path;          // each node sees the committed rows, its ancestors and itself
  uint32_t save_row = 0;       // the nodes' u go to u_history rows [save_row, save_row + rows)
  // Logits of every row go to the logits buffer ([rows, Vd]); no argmax is taken.
};

struct DraftPass {
  uint32_t rows = 0;
  bool from_taps = false;
  ops::Act taps;               // [rows, 3 Ht] when from_taps
  ops::IntVec ids;             // token ids (target vocabulary), `rows` of them
  ops::IntVec positions;       // draft positions, `rows` of them
  uint32_t feature_row = 0;    // steps: the feature row to continue from
  uint32_t kv_len = 0;         // last position + 1
  ops::IntVec out_token;
  bool batch_invariant = true;
  const DraftTreeStep* tree = nullptr;
  // Several sequences in one pass (batched decoding), not with a tree:
  //   slots: each row's KV cache row, its sequence's first cache row + position;
  //   catch-up: `proposal_rows` lists each sequence's last row (`proposals` of them); their
  //     outputs move to feature rows [0, proposals) and each proposes a token;
  //   steps: `rows` rows continue from feature rows [feature_row, feature_row + rows), one per
  //     sequence, and each proposes a token.
  // The proposals go to out_token, one per sequence in row order.
  const ops::IntVec* slots = nullptr;
  ops::IntVec proposal_rows;
  uint32_t proposals = 0;
};

// Returns the row of the feature buffer that holds this pass's last pre-norm output.
uint32_t record_eagle3_forward(ops::OpContext& oc, const Eagle3Model& m, Eagle3State& s, const TargetWeights& target,
                               const DraftPass& pass);

}  // namespace eaglevk::models
