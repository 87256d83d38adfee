#pragma once
// The forward every target family shares: the pass checks, the input embeddings (image feature
// rows included), the taps of the residual stream entering each layer, the flash-decoding split,
// and the final norm, lm_head and argmax. A family writes only its layer body; the scaffold calls
// it once per layer, between the taps, in layer order. Helpers for the pieces several bodies
// record the same way (the attention parameters of a pass, the rotation and cache write of a
// layer, the dense SwiGLU MLP) sit here too, so that no family copies them.
#include <cstdint>

#include "models/family.h"
#include "models/target_state.h"
#include "models/weight_loading.h"
#include "runtime/ops/ops.h"

namespace eaglevk::models {

// What the scaffold reads of a family's weights.
struct ScaffoldWeights {
  ops::WeightMatrix embed;    // [V, H]; empty on a part of a split model that does not hold it
  const vk::Buffer* norm;     // [H] f32, the final norm
  ops::WeightMatrix lm_head;  // [V, H] (embed when tied); empty where the part does not hold it
  uint32_t layers = 0, hidden = 0;
  float eps = 0;              // the final norm's
  LayerRange range = {};      // the layers this device holds (a model split across devices)
};

// A family's weights as the scaffold reads them: any model struct with embed, norm, lm_head,
// layers and range fields.
template <class Model>
ScaffoldWeights scaffold_weights(const Model& m, uint32_t hidden, float eps) {
  const bool head = m.lm_head.buffer || m.embed.buffer;
  return {m.embed.buffer ? m.embed.matrix() : ops::WeightMatrix{}, &m.norm,
          head ? m.lm_head_matrix() : ops::WeightMatrix{}, uint32_t(m.layers.size()), hidden, eps, m.range};
}

// What a layer body gets besides its layer index.
struct LayerPass {
  ops::Act x;                        // the residual stream [rows, H], updated in place
  uint32_t rows = 0;
  ops::MatmulPath path;              // Vector for batch-invariant passes
  ops::IntVec positions;
  const ops::AttentionSplit& split;  // flash-decoding, the same for every layer
};

// Fails for a pass of no rows, more rows than the state holds, or a position past its context.
void check_pass(const TargetState& s, const ForwardPass& pass);

// The attention parameters of a layer in this pass: heads, 1/sqrt(head_dim), the tree or the
// batched sequences' regions, the split. `chunk` 0: no chunked attention.
ops::AttentionParams pass_attention(const ForwardPass& pass, const ops::AttentionSplit& split, uint32_t heads,
                                    uint32_t kv_heads, uint32_t head_dim, uint32_t chunk = 0);

// The rotation and cache write of layer `layer` in this pass (cache rows: the pass's slots, else
// the positions).
ops::RopeKv pass_rope_kv(const TargetState& s, const ForwardPass& pass, uint32_t layer, uint32_t heads,
                         uint32_t head_dim, ops::RopePairing pairing);

// x += down(silu(gate(norm(x))) * up(norm(x))): a dense MLP of `width` with its pre-norm, in the
// state's ffn_norm, gate_up and act buffers.
void record_dense_mlp(ops::OpContext& oc, const TargetState& s, const LayerPass& lp, const vk::Buffer& ffn_norm,
                      float eps, const DeviceMatrix& gate_up, const DeviceMatrix& down, uint32_t width);

// Records one pass: checks, embeddings, for each layer l the taps at l then body(l, layer_pass),
// the taps at L, then the logits of rows [logits_from, rows). A template so that the body's
// lambda is called directly, with nothing allocated on the recording path. On a part of a
// model split across devices only the part's layers run: a part after the first starts from
// the residual stream its predecessor left in s.hidden_in, and a part before the last ends by
// leaving it in s.hidden_out (record_hidden_hop) instead of computing logits.
template <class LayerBody>
void record_target_scaffold(ops::OpContext& oc, TargetState& s, const ForwardPass& pass, const ScaffoldWeights& w,
                            LayerBody&& body) {
  check_pass(s, pass);
  const ops::Act x(s.arena[s.x], w.hidden);
  const uint32_t first = w.range.first, end = w.range.end_of(w.layers);
  if (first == 0)
    record_input_embeddings(oc, pass, s, w.embed, x, w.hidden);
  else
    record_hidden_hop(oc, s, pass, x, w.hidden, /*into_x=*/true);
  const ops::AttentionSplit split = ops::attention_split(s.split_keys, s.split_scratch);
  const LayerPass lp{x, pass.rows, pass.batch_invariant ? ops::MatmulPath::Vector : ops::MatmulPath::Auto,
                     ops::IntVec{s.positions}, split};
  for (uint32_t l = first; l < end; ++l) {
    record_taps(oc, pass, x, l, w.hidden);
    body(l, lp);
  }
  if (end < w.layers) return record_hidden_hop(oc, s, pass, x, w.hidden, /*into_x=*/false);
  record_taps(oc, pass, x, w.layers, w.hidden);
  record_logits(oc, s, pass, x, *w.norm, w.lm_head, w.eps);
}

}  // namespace eaglevk::models
