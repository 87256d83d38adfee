#pragma once
// One entry per op family. Each records dispatches into oc.rec and declares what it reads
// and writes, so the recorder can place barriers. Shapes are in elements; activations f32.
#include <cstdint>
#include <optional>
#include <vector>

#include "runtime/ops/gpu.h"
#include "runtime/ops/tensor.h"

namespace eaglevk::ops {

// An int32 vector on the device (token ids, positions), starting `offset` elements in.
struct IntVec {
  vk::BufferRange range;
  uint32_t offset = 0;
};

// out[t, :] = table[ids[t], :] for t < tokens.
void embed(OpContext& oc, IntVec ids, uint32_t tokens, const WeightMatrix& table, Act out);

// y = w * (x * rsqrt(mean(x^2) + eps)) per row; without weight it is Llama-4's QK norm.
void rms_norm(OpContext& oc, Act x, const vk::BufferRange* weight, Act y, uint32_t rows, uint32_t dim, float eps,
              const char* name = "rms_norm");

// nn.LayerNorm per row: y = (x - mean) * rsqrt(var + eps) * weight + bias (f32 vectors of dim).
void layer_norm(OpContext& oc, Act x, vk::BufferRange weight, vk::BufferRange bias, Act y, uint32_t rows, uint32_t dim,
                float eps, const char* name = "layer_norm");

// In place over each of `heads` consecutive head_dim-wide pieces of each row: without weight,
// Llama-4's QK norm on the q and k heads of a fused qkv row; with one ([head_dim] f32, shared by
// the heads), Qwen3's q_norm or k_norm.
void rms_norm_heads(OpContext& oc, Act x, uint32_t rows, uint32_t heads, uint32_t head_dim, float eps,
                    const vk::BufferRange* weight = nullptr, const char* name = "qk_norm");

enum class MatmulPath {
  Auto,    // matrix-vector for up to MATVEC_MAX_ROWS rows, tiled GEMM above
  Vector,  // matrix-vector in groups of MATVEC_MAX_ROWS rows: batch-invariant at any row count
  Tiled,   // always the tiled GEMM
};

// The matrix-vector kernel's shape on this device (or gpu.matvec_shape_override). Fixed per
// device, so results are reproducible.
MatvecShape matvec_shape(const Gpu& gpu);
// The shape for one weight matrix: the device's, with its split workgroup where the matrix has
// few rows and long ones (MatvecShape::split_workgroup). Every product with `w` uses it.
MatvecShape matvec_shape(const Gpu& gpu, const WeightMatrix& w);
// The shape a device with these subgroup properties gets: lavapipe's (8: one subgroup of 8,
// 4 outputs, texel loads), NVIDIA's (32: one subgroup of 32, 2 outputs), AMD's and Intel's
// (variable subgroup size: 64 threads with a shared-memory reduction, 2 outputs). `cpu_device`:
// a CPU implementation with storage texel buffers.
MatvecShape matvec_shape_for(uint32_t subgroup_size, uint32_t min_subgroup_size, uint32_t max_subgroup_size,
                             bool cpu_device, uint32_t vendor_id = 0);

// Whether the matrix-vector kernel reads x and this chunk of W through texel buffers on a device
// whose shape has texel_loads: x rows start on 16-byte texels and the chunk can be viewed.
bool matvec_texel_loads(Act x, const WeightMatrix& w, vk::BufferRange wchunk);

// An RMSNorm with a weight folded into the matrix-vector product that consumes it: x is the
// norm's input, and the product reads weight * (x * rsqrt(mean(x^2) + eps)) as it loads x, each
// workgroup forming the rows' scales in rms_norm's own order (matvec.comp NORM_WG), so y gets
// the bits of rms_norm then matmul, one dispatch fewer and no round trip through memory.
struct NormFold {
  vk::BufferRange weight;  // f32 [K]
  float eps = 0;
};
// Whether matmul can fold a norm in front of w for `rows` rows: gpu.fold_norms, the
// matrix-vector path, float weights whose rows are a multiple of 8 long, and a device whose
// subgroup size is fixed and lets a product workgroup play the norm's (matvec.comp says why).
bool norm_folds(const Gpu& gpu, const WeightMatrix& w, uint32_t rows, MatmulPath path);

// y[r, :] (+)= x[r, :] W^T for r < rows. W is [N, K]; x rows have K columns, y rows N. With
// `norm` (only where norm_folds), y[r, :] (+)= rms_norm(x[r, :]) W^T.
void matmul(OpContext& oc, Act x, const WeightMatrix& w, Act y, uint32_t rows, bool accumulate = false,
            MatmulPath path = MatmulPath::Auto, const char* name = "matmul", const NormFold* norm = nullptr);

// out = swiglu(x gate_up^T) for a fused [gate; up] matrix of 2 * width rows: the matrix-vector
// kernel computes each gate/up pair and writes silu(gate) * up straight away (one dispatch, the
// bits of matmul then swiglu) where swiglu_fuses; elsewhere (the GEMM, a matrix bound in
// chunks, an odd number of outputs per workgroup) matmul into gu [rows, 2 * width], then swiglu.
bool swiglu_fuses(const Gpu& gpu, const WeightMatrix& gate_up, uint32_t rows, MatmulPath path);
void matmul_swiglu(OpContext& oc, Act x, const WeightMatrix& gate_up, Act gu, Act out, uint32_t rows, MatmulPath path,
                   const char* name, const NormFold* norm = nullptr);

// Experts stored as one [E, N, K] tensor (each expert's [N, K] weight, HF nn.Linear layout).
struct ExpertWeights {
  vk::BufferRange data;  // all experts back to back, unless `groups` is set
  WeightType type = WeightType::F32;
  uint32_t experts = 0, rows = 0, cols = 0;  // E, N, K
  // Stored [E, K, N] (Hugging Face's fused layout, used as x W) instead of [E, N, K]; float
  // types only. Read in place: no transposed copy is ever made.
  bool k_major = false;
  // Experts spread over several allocations (a Scout expert tensor is 2.7 GB in bf16, more than
  // many drivers allocate at once): groups[i] holds experts [i * per_group, (i + 1) * per_group).
  std::vector<vk::BufferRange> groups;
  uint32_t per_group = 0;

  uint64_t expert_bytes() const;
  vk::BufferRange expert_range(uint32_t e) const;  // expert_bytes() rounded up to whole words
  WeightMatrix expert(uint32_t e) const;           // [N, K]; not for k_major
};

// Mixture-of-experts routing (Llama-4): for each of `rows` rows of router logits [rows, E],
// the top-`k` experts (ties to the lower id) into ids[r * k + s] and the expert input
// x[r] * sigmoid(logit) into xs row r * k + s.
void moe_route(OpContext& oc, Act logits, Act x, uint32_t rows, uint32_t experts, uint32_t k, uint32_t dim,
               IntVec ids, Act xs);

// y[r / slots, :] (+)= x[r, :] W[ids[r]]^T for rows r with r % slots == slot: each row picks
// its own expert's weights. Batch-invariant: a row's result never depends on the others.
// With `row_lists` (group_rows_by_expert's, for these ids and rows) and more than
// MATVEC_MAX_ROWS rows, a prefill's product: a GEMM per expert over the rows it was given, so
// each expert's weights are read once for all its rows rather than once per row (the GEMM's
// bits, not the matrix-vector kernel's; still independent of the other rows). Experts that do
// not fit one binding each fall back to the per-row kernel.
void matmul_id(OpContext& oc, Act x, const ExpertWeights& w, IntVec ids, Act y, uint32_t rows, uint32_t slots,
               uint32_t slot, bool accumulate, const char* name = "matmul_id", const IntVec* row_lists = nullptr);

// out = swiglu of the gate and up halves of matmul_id(x, gate_up) (gate rows, then up rows;
// slots 1): one dispatch with the bits of matmul_id then swiglu, where the per-row kernel runs
// and each expert is bound whole; elsewhere (a grouped prefill, an expert bound in chunks)
// matmul_id into gu [rows, 2 * width], then swiglu.
void matmul_id_swiglu(OpContext& oc, Act x, const ExpertWeights& gate_up, IntVec ids, Act gu, Act out, uint32_t rows,
                      const char* name = "matmul_id_swiglu", const IntVec* row_lists = nullptr);

// Whether a pass of `rows` expert rows on `path` groups them by expert (a prefill's Auto path
// with more than MATVEC_MAX_ROWS rows): its caller then makes the row lists for matmul_id.
bool expert_rows_grouped(uint32_t rows, MatmulPath path);

// The rows of each expert, for matmul_id's grouped GEMM: lists at [e * (rows + 1)] the count of
// rows r < rows with ids[r] == e, then those rows in ascending order. `lists` holds
// experts * (rows + 1) int32 (moe_row_lists_bytes).
void group_rows_by_expert(OpContext& oc, IntVec ids, uint32_t rows, uint32_t experts, IntVec lists);
uint64_t moe_row_lists_bytes(uint32_t rows, uint32_t experts);

enum class RopePairing : uint32_t {
  RotateHalf = 0,   // HF Llama-3: (i, i + hd/2)
  Interleaved = 1,  // HF Llama-4: (2i, 2i + 1)
  None = 2,         // no rotation (Llama-4's NoPE layers): rope_kv_write only writes the cache
};

// cos/sin table [max_positions][head_dim/2] of (cos, sin) pairs, angle = f32(pos) * inv_freq[j]
// rounded to f32 as torch computes it, then cos and sin in double.
std::vector<float> rope_table(const std::vector<float>& inv_freq, uint32_t max_positions);

// Rotates `heads` heads of head_dim starting at column 0 of x, in place.
void rope(OpContext& oc, Act x, uint32_t rows, uint32_t heads, uint32_t head_dim, IntVec positions,
          vk::BufferRange table, uint32_t table_positions, RopePairing pairing);

// The f16 KV cache of one layer: [capacity][kv_dim] halves.
struct KvLayer {
  vk::BufferRange k;
  vk::BufferRange v;
  uint32_t capacity = 0;
  uint32_t kv_dim = 0;
};

// Writes k (columns [0, kv_dim) of k_rows) and v rows into the cache at the given rows (their
// positions, except for tree nodes).
void kv_write(OpContext& oc, Act k_rows, Act v_rows, uint32_t rows, IntVec positions, const KvLayer& kv);

// The rotation and cache write that follow a fused q | k | v product: each row holds q_heads q
// heads, then kv.kv_dim / head_dim k heads and as many v heads, of head_dim each.
struct RopeKv {
  uint32_t q_heads = 0, head_dim = 0;
  IntVec positions;
  vk::BufferRange table;  // rope_table's, of table_positions positions
  uint32_t table_positions = 0;
  RopePairing pairing = RopePairing::RotateHalf;
  IntVec slots;  // the cache rows: the positions, except for tree nodes and batched sequences
  KvLayer kv;
};

// rope of the q heads in place, and kv_write of the rotated k and the v at the slots, in one
// dispatch with the bits of rope then kv_write; the row's own k columns are left unrotated.
// RopePairing::None: kv_write alone (the table and positions are not read).
void rope_kv_write(OpContext& oc, Act qkv, uint32_t rows, const RopeKv& rope);

// Llama-4's rope layers with QK norm: rope of the q and k heads, rms_norm_heads of them, then
// kv_write of k and v at the slots, in one dispatch (norm.comp ROPE_KV) with the bits of the three
// (each head's norm formed as rms_norm_heads forms it, with gpu.norm_workgroup invocations). qkv's
// q and k columns end rotated and normalised, as after the three. head_dim at most
// ATTENTION_MAX_HEAD_DIM. Without gpu.fold_rope it records the three.
void rope_norm_kv_write(OpContext& oc, Act qkv, uint32_t rows, const RopeKv& rope, float eps);

// rope_kv_write folded into the product that makes the columns [first, first + w.rows) of the
// q | k | v rows (all of them, or one part of a matrix stored in several types): qkv.cols(first)
// gets x W^T with its q heads rotated, and its k and v heads go to the caches, by rope.comp's
// expressions on the sums (matvec.comp ROPE_KV): the bits of matmul then rope_kv_write, one
// dispatch fewer. rope_folds: gpu.fold_rope, the matrix-vector path, a part of whole heads
// whose head_dim is a multiple of 4, and the part bound whole.
bool rope_folds(const Gpu& gpu, const WeightMatrix& w, uint32_t first, uint32_t rows, MatmulPath path,
                const RopeKv& rope);
void matmul_rope_kv(OpContext& oc, Act x, const WeightMatrix& w, uint32_t first, Act qkv, uint32_t rows,
                    MatmulPath path, const char* name, const RopeKv& rope, const NormFold* norm = nullptr);

// The rows of a pass that are nodes of a speculation tree: row r's ancestors (root first, itself
// last) are stored in cache rows base + table[offset + r * stride + d], d = 0..depth, and its
// position is base + depth. Keys below base are committed rows stored at their positions.
struct TreePath {
  vk::BufferRange table;  // int32
  uint32_t offset = 0;    // elements
  uint32_t stride = 0;    // entries per row (the deepest row's depth + 1, or more)
  uint32_t base = 0;
  // >= 0: the base is table[base_slot], written on the device (a replayed round's commands
  // serve rounds at other positions); `base` is then unused.
  int32_t base_slot = -1;
};

// Flash-decoding: attention split along the context into workgroups of `keys` keys each, whose
// partial states a second pass merges (shaders/attention_combine.comp). A GPU runs one decode
// row's (KV head) in one workgroup otherwise: 8 of an H100's 132 multiprocessors for an 8B model,
// however long the context. The splits' boundaries are fixed multiples of `keys`, so the bits
// depend on `keys`, never on the dispatch: every pass of a session must use the same value.
struct AttentionSplit {
  uint32_t keys = 0;        // keys per split; 0: unsplit
  vk::BufferRange scratch;  // f32 partial states, a chunk of rows at a time (attention_split_row_bytes each)
};
// Keys per split on this device: the profile's attention.split (0 turns splitting off; otherwise a
// multiple of 64), else 64 on GPUs (one block a split) and 0 on CPU devices (lavapipe runs a
// few workgroups per thread already, and the merge would cost it a dispatch a layer).
uint32_t attention_split_keys(const vk::Context& ctx);
// Bytes of one row's partial states when attention reads keys below kv_len.
uint64_t attention_split_row_bytes(uint32_t heads, uint32_t head_dim, uint32_t kv_len, uint32_t keys);
// The scratch a model state allocates for `keys` (no buffer when 0): max_rows rows at
// `capacity`, or fewer rows, at least one, where that passes 16 MiB (attention then takes its
// rows in chunks, which changes nothing in the result).
vk::Buffer make_attention_split_scratch(const vk::Context& ctx, uint32_t heads, uint32_t head_dim, uint32_t capacity,
                                        uint32_t max_rows, uint32_t keys, const char* name);
// A model state's split: its keys and its scratch (none when keys is 0).
inline AttentionSplit attention_split(uint32_t keys, const vk::Buffer& scratch) {
  return {keys, keys ? vk::BufferRange(scratch) : vk::BufferRange()};
}

struct AttentionParams {
  uint32_t heads = 0;
  uint32_t kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t kv_len = 0;  // valid cache rows
  uint32_t chunk = 0;   // Llama-4 chunked attention size, 0 = none
  float scale = 0;      // usually 1/sqrt(head_dim)
  // Optional: the rows are tree nodes (verification of a speculation tree, the draft's tree
  // steps); each sees the committed rows and its own ancestors, as a sequential pass would.
  const TreePath* tree = nullptr;
  // Optional: [rows] per-row query scale.
  const vk::BufferRange* qscale = nullptr;
  // Llama-4 attention temperature tuning from each row's position (NoPE layers).
  bool temperature_tuning = false;
  float floor_scale = 0, attn_scale = 0;
  // Optional: several sequences share the cache, each in its own rows: regions[row] is the
  // cache row the row itself was written to (kv_write's slot), and its sequence's position j
  // lies at regions[row] - position + j. Not with `tree`.
  const IntVec* regions = nullptr;
  // Optional: split the context (flash-decoding) when kv_len spans more than one split.
  const AttentionSplit* split = nullptr;
};

void attention(OpContext& oc, Act q, const KvLayer& kv, IntVec positions, Act out, uint32_t rows,
               const AttentionParams& params);
// Llama-4 vision attention: rows are whole tiles of `seq` rows; each row attends to every row
// of its own tile (bidirectional), f32 q | k | v column ranges of `qkv` (heads * head_dim
// each, no GQA), scores scaled by `scale`. out gets heads * head_dim columns.
void vision_attention(OpContext& oc, Act qkv, Act out, uint32_t rows, uint32_t seq, uint32_t heads, uint32_t head_dim,
                      float scale);

// The most keys one attention row may see on this device: unbounded (UINT32_MAX) except on CPU
// devices, where llvmpipe stops an invocation's loops after 65,535 iterations in all (see
// attention.comp); attention() refuses more rather than return a truncated softmax.
uint32_t attention_max_keys(const vk::Context& ctx, uint32_t head_dim);

// out = silu(x[:, gate]) * x[:, up], `width` columns each.
void swiglu(OpContext& oc, Act gate, Act up, Act out, uint32_t rows, uint32_t width);

// dst[r, :width] = src[r, :width].
void copy_rows(OpContext& oc, Act src, Act dst, uint32_t rows, uint32_t width, const char* name = "copy_rows");

// dst[r, :width] = src[index[r], :width] for r < rows; the source has `src_rows` rows (all
// declared read: which ones is decided on the device).
void gather_rows(OpContext& oc, Act src, uint32_t src_rows, IntVec index, Act dst, uint32_t rows, uint32_t width,
                 const char* name = "gather_rows");

// In place: x[r, c] += bias[(r % period) * width + c], then the exact GELU when `gelu`. A
// linear layer's bias has period 1; a per-position table (the vision positional embedding)
// has one row per position of a tile.
void add_bias(OpContext& oc, Act x, uint32_t rows, uint32_t width, vk::BufferRange bias, uint32_t period = 1,
              bool gelu = false, const char* name = "add_bias");
// In place: x = GELU(x), the exact (erf) form of nn.GELU().
void gelu(OpContext& oc, Act x, uint32_t rows, uint32_t width, const char* name = "gelu");

// out = a + b over n floats.
void add(OpContext& oc, vk::BufferRange a, vk::BufferRange b, vk::BufferRange out, uint32_t n);

// Row softmax in place of x * inv_temp.
void softmax(OpContext& oc, Act x, uint32_t rows, uint32_t n, float inv_temp = 1.0f);

// ids[r] = argmax over row r (ties to the lowest index), mapped by d2t when given.
void argmax(OpContext& oc, Act x, uint32_t rows, uint32_t n, IntVec ids, const vk::BufferRange* d2t = nullptr);

// Sampling and speculative acceptance from logits rows (shaders/sample.comp).
struct SampleParams {
  float temperature = 0;  // 0: greedy
  uint32_t top_k = 0;
  float top_p = 1;
  uint64_t seed = 0;
  uint32_t first_position = 0;  // absolute position of the token row 0 decides
  // Each row's own settings instead of the four above: records of SAMPLE_ROW_WORDS words
  // (shaders/shared_constants.h) from row_params' offset, row r reading record row_index[r]
  // (record r without an index). Rows of one dispatch then sample each its own way.
  const IntVec* row_params = nullptr;
  const IntVec* row_index = nullptr;
};
enum class AcceptRule : uint32_t {
  Correct = 0,
  AcceptIfArgmax = 1,         // wrong: a negative control for tests
  ResampleWithoutRemoval = 2, // wrong: a negative control for tests
};
// Drafts drawn from the draft's own distribution q (the second speculative scheme).
struct DraftDistribution {
  enum class Mode : uint32_t {
    Draw = 1,    // rows are draft logits: ids = the draw mapped through d2t, q rows written
    Verify = 2,  // rows are target logits: accept with min(1, p/q), replace from max(0, p - q)
  } mode = Mode::Draw;
  vk::BufferRange q;        // f32 [rows, width]: the draft's filtered distributions
  uint32_t width = 0;       // draft vocabulary size
  const vk::BufferRange* d2t = nullptr;  // Draw: int32 [width] offsets; null = identity
  vk::BufferRange t2d;      // Verify: int32 [target vocab]: draft id of each target id, or -1
  uint32_t q_row = 0;       // Draw: the q row that row 0 of this draw writes
};

// The sampling kernel's workgroup for rows of n logits: 64 up to 16,384 (the barriers of its
// threshold searches cost per subgroup), 256 above, where 64 invocations would pass llvmpipe's
// limit of 65,535 loop turns per invocation on a 202,048-token row. One rule on every device,
// so that a seed gives the same sums, and the same draws, wherever the subgroups allow it.
uint32_t sample_workgroup(uint32_t n);

// Without drafts: ids[r] = a draw from row r's filtered distribution. With drafts[r] = d:
// accept[r] = 1 with probability p(d) and ids[r] = a draw from p with d removed. `stream`
// offsets the random streams so that independent draws at one position stay independent.
// Row r decides the token at params.first_position + r, or at params.first_position +
// positions[r] when `positions` is given (tree rows, whose positions follow their depth).
void sample(OpContext& oc, Act logits, uint32_t rows, uint32_t n, const IntVec* drafts, IntVec ids, IntVec accept,
            const SampleParams& params, AcceptRule rule = AcceptRule::Correct,
            const DraftDistribution* distribution = nullptr, uint32_t stream = 0, const IntVec* positions = nullptr);

}  // namespace eaglevk::ops
