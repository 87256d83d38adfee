#include "models/llama4_vision.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include "loader/hf_config.h"

namespace eaglevk::models {

namespace jf = loader::json_field;

std::optional<Llama4VisionConfig> read_llama4_vision_config(const loader::ModelFiles& files, uint32_t text_hidden) {
  const nlohmann::json& j = files.config;
  if (!j.contains("vision_config") || !j["vision_config"].is_object()) return std::nullopt;
  const nlohmann::json& v = j["vision_config"];
  const std::string source =
      files.mmproj.empty() ? (files.folder / "config.json").string() + " vision_config" : files.mmproj.string();
  auto positive = [&](const char* key) {
    int value = jf::required_int(v, key, source);
    if (value <= 0) fail("{}: {} must be positive (got {})", source, key, value);
    return uint32_t(value);
  };
  Llama4VisionConfig c;
  c.image_size = positive("image_size");
  c.patch_size = positive("patch_size");
  c.hidden = positive("hidden_size");
  c.heads = positive("num_attention_heads");
  c.intermediate = positive("intermediate_size");
  c.layers = positive("num_hidden_layers");
  c.projector_input_dim = positive("projector_input_dim");
  c.projector_output_dim = positive("projector_output_dim");
  c.norm_eps = jf::optional_float(v, "norm_eps", source).value_or(1e-5f);
  c.rope_theta = jf::optional_float(v, "rope_theta", source).value_or(10000.0f);
  c.text_hidden = text_hidden;
  if (c.image_size % c.patch_size) fail("{}: image_size {} is not a multiple of patch_size {}", source, c.image_size, c.patch_size);
  if (c.side() % 2) fail("{}: {} patches per tile side; the 2x2 pixel shuffle needs an even number", source, c.side());
  if (c.hidden % c.heads) fail("{}: hidden_size {} is not a multiple of {} heads", source, c.hidden, c.heads);
  c.head_dim = c.hidden / c.heads;
  if (c.head_dim % 4)
    fail("{}: head_dim {} must be a multiple of 4 (the 2-D RoPE splits its pairs into x and y halves)", source, c.head_dim);
  const float ratio = jf::optional_float(v, "pixel_shuffle_ratio", source).value_or(0.5f);
  if (ratio != 0.5f) fail("{}: pixel_shuffle_ratio {} is not supported (Llama-4 uses 0.5)", source, ratio);
  if (c.intermediate != 4 * c.hidden)
    fail("{}: intermediate_size {} must be 4 x hidden_size {} (the pixel shuffle's width, as Hugging Face requires)",
         source, c.intermediate, c.hidden);
  const std::string act = jf::optional_string(v, "hidden_act", source).value_or("gelu");
  if (act != "gelu") fail("{}: hidden_act '{}' is not supported (the exact GELU)", source, act);
  const int output_dim = jf::optional_int(v, "vision_output_dim", source).value_or(int(c.projector_output_dim));
  if (output_dim != int(c.projector_output_dim))
    fail("{}: vision_output_dim {} differs from projector_output_dim {}", source, output_dim, c.projector_output_dim);
  if (jf::optional_bool(v, "multi_modal_projector_bias", source).value_or(false))
    fail("{}: a projector with bias is not supported", source);
  const std::string top = files.mmproj.empty() ? (files.folder / "config.json").string() : files.source();
  c.image_start_id = jf::required_int(j, "boi_token_index", top);
  c.image_end_id = jf::required_int(j, "eoi_token_index", top);
  c.patch_id = jf::required_int(j, "image_token_index", top);
  return c;
}

std::optional<Llama4VisionConfig> usable_llama4_vision(const loader::ModelFiles& files, uint32_t text_hidden,
                                                       int64_t vocab, std::string* why) {
  auto refuse = [&](std::string reason) -> std::optional<Llama4VisionConfig> {
    if (why) *why = std::move(reason);
    return std::nullopt;
  };
  if (files.format == "gguf" && files.mmproj.empty())
    return refuse("a GGUF file holds the text model only: llama.cpp keeps the vision tower in a separate file "
                  "(mmproj-*.gguf), which must be given with it");
  std::optional<Llama4VisionConfig> c = read_llama4_vision_config(files, text_hidden);
  if (!c) return refuse("the checkpoint has no vision_config");
  const int32_t ids[] = {c->image_start_id, c->image_end_id, c->patch_id};
  if (!files.checkpoint.find("vision_model.patch_embedding.linear.weight"))
    return refuse("config.json has a vision_config but the checkpoint has no vision_model tensors");
  if (ids[0] == ids[1] || ids[0] == ids[2] || ids[1] == ids[2])
    return refuse(fmt::format("its image token ids are placeholders (boi {}, eoi {}, image {})", ids[0], ids[1], ids[2]));
  for (int32_t id : ids)
    if (id < 0 || id >= vocab)
      return refuse(fmt::format("its image token ids (boi {}, eoi {}, image {}) are outside the vocabulary of {}", ids[0],
                                ids[1], ids[2], vocab));
  return c;
}

namespace {

// A 2-D tensor of `rows` x `cols` as one f32 buffer.
vk::Buffer upload_f32_table(const vk::Context& ctx, vk::Uploader& up, const loader::TensorView& t, int64_t rows,
                            int64_t cols) {
  expect_shape(t, {rows, cols});
  std::vector<float> values = loader::to_f32(t);
  vk::Buffer b(ctx, values.size() * 4, vk::MemoryKind::Device, t.name);
  up.put(b, values.data(), values.size() * 4);
  up.flush();
  return b;
}

}  // namespace

Llama4Vision load_llama4_vision(const vk::Context& ctx, vk::Uploader& up, TensorUse& use, const Llama4VisionConfig& c) {
  Llama4Vision v;
  v.config = c;
  const int64_t D = c.hidden, I = c.intermediate, p = c.patch_size;
  const std::string P = "vision_model.";
  auto matrix = [&](MatrixParts parts, const std::string& name) { return load_matrix(ctx, up, use, parts, name); };
  auto vec = [&](const std::string& name, int64_t n) { return upload_f32_vector(ctx, up, use.get(name), n); };

  v.patch_embedding = matrix({{P + "patch_embedding.linear.weight", {D, 3 * p * p}}}, "vision patch_embedding");
  v.class_embedding = vec(P + "class_embedding", D);
  v.positional = upload_f32_table(ctx, up, use.get(P + "positional_embedding_vlm"), c.seq(), D);
  v.pre_weight = vec(P + "layernorm_pre.weight", D);
  v.pre_bias = vec(P + "layernorm_pre.bias", D);
  v.post_weight = vec(P + "layernorm_post.weight", D);
  v.post_bias = vec(P + "layernorm_post.bias", D);
  for (uint32_t l = 0; l < c.layers; ++l) {
    const std::string q = fmt::format("{}model.layers.{}.", P, l);
    Llama4VisionLayer L;
    L.ln1_weight = vec(q + "input_layernorm.weight", D);
    L.ln1_bias = vec(q + "input_layernorm.bias", D);
    L.ln2_weight = vec(q + "post_attention_layernorm.weight", D);
    L.ln2_bias = vec(q + "post_attention_layernorm.bias", D);
    L.qkv = matrix({{q + "self_attn.q_proj.weight", {D, D}},
                    {q + "self_attn.k_proj.weight", {D, D}},
                    {q + "self_attn.v_proj.weight", {D, D}}},
                   q + "qkv");
    L.q_bias = vec(q + "self_attn.q_proj.bias", D);
    L.k_bias = vec(q + "self_attn.k_proj.bias", D);
    L.v_bias = vec(q + "self_attn.v_proj.bias", D);
    L.o = matrix({{q + "self_attn.o_proj.weight", {D, D}}}, q + "o_proj");
    L.o_bias = vec(q + "self_attn.o_proj.bias", D);
    L.fc1 = matrix({{q + "mlp.fc1.weight", {I, D}}}, q + "fc1");
    L.fc1_bias = vec(q + "mlp.fc1.bias", I);
    L.fc2 = matrix({{q + "mlp.fc2.weight", {D, I}}}, q + "fc2");
    L.fc2_bias = vec(q + "mlp.fc2.bias", D);
    v.layers.push_back(std::move(L));
  }
  v.adapter_fc1 = matrix({{P + "vision_adapter.mlp.fc1.weight", {c.projector_input_dim, 4 * D}}}, "vision adapter fc1");
  v.adapter_fc2 = matrix({{P + "vision_adapter.mlp.fc2.weight", {c.projector_output_dim, c.projector_input_dim}}},
                         "vision adapter fc2");
  v.projector = matrix({{"multi_modal_projector.linear_1.weight", {c.text_hidden, c.projector_output_dim}}},
                       "multi_modal_projector");
  std::vector<float> table = vision_rope_table(c.side(), c.head_dim, c.rope_theta);
  v.rope_table = vk::Buffer(ctx, table.size() * 4, vk::MemoryKind::Device, "vision rope table");
  up.put(v.rope_table, table.data(), table.size() * 4);
  up.flush();
  return v;
}

std::vector<float> unfold_patches(std::span<const float> pixels, uint32_t tiles, uint32_t tile, uint32_t patch) {
  const uint32_t side = tile / patch, per = 3 * patch * patch;
  if (pixels.size() != size_t(tiles) * 3 * tile * tile)
    fail("unfold_patches: {} pixel values for {} tiles of 3 x {} x {}", pixels.size(), tiles, tile, tile);
  std::vector<float> out(size_t(tiles) * side * side * per);
  size_t o = 0;
  for (uint32_t t = 0; t < tiles; ++t)
    for (uint32_t py = 0; py < side; ++py)
      for (uint32_t px = 0; px < side; ++px)
        for (uint32_t ch = 0; ch < 3; ++ch)
          for (uint32_t ky = 0; ky < patch; ++ky) {
            const size_t row = ((size_t(t) * 3 + ch) * tile + py * patch + ky) * tile + px * patch;
            std::copy_n(pixels.begin() + row, patch, out.begin() + o);
            o += patch;
          }
  return out;
}

std::vector<float> vision_rope_table(uint32_t side, uint32_t head_dim, float theta) {
  const uint32_t pairs = head_dim / 2, quarter = head_dim / 4, N = side * side;
  // Frequencies and angles in f32, as torch computes them; cos and sin of the f32 angle in double.
  std::vector<float> freq(quarter);
  for (uint32_t i = 0; i < quarter; ++i)
    freq[i] = 1.0f / std::pow(theta, float(2 * i) / float(pairs));
  std::vector<float> table(size_t(N + 1) * pairs * 2);
  for (uint32_t n = 0; n <= N; ++n)
    for (uint32_t j = 0; j < pairs; ++j) {
      float angle = 0;  // the class token (n == N) is not turned
      if (n < N) angle = float((j < quarter ? n % side : n / side) + 1) * freq[j % quarter];
      table[(size_t(n) * pairs + j) * 2] = float(std::cos(double(angle)));
      table[(size_t(n) * pairs + j) * 2 + 1] = float(std::sin(double(angle)));
    }
  return table;
}

std::vector<int32_t> pixel_shuffle_rows(uint32_t tiles, uint32_t side) {
  const uint32_t N = side * side, half = side / 2;
  std::vector<int32_t> rows;
  rows.reserve(size_t(tiles) * N);
  for (uint32_t t = 0; t < tiles; ++t)
    for (uint32_t r = 0; r < half; ++r)
      for (uint32_t c = 0; c < half; ++c)
        for (uint32_t q = 0; q < 4; ++q) rows.push_back(int32_t(t * (N + 1) + (2 * r + q / 2) * side + 2 * c + q % 2));
  return rows;
}

VisionWorkspace make_vision_workspace(const vk::Context& ctx, const Llama4Vision& v, uint32_t tiles) {
  const Llama4VisionConfig& c = v.config;
  const uint64_t N = c.patches(), S = c.seq(), D = c.hidden, I = c.intermediate;
  const uint64_t widest = std::max({3 * D, I, uint64_t(3) * c.patch_size * c.patch_size,
                                    uint64_t(c.projector_input_dim + c.projector_output_dim)});
  const uint64_t per_tile = S * widest * 4;
  if (per_tile > ctx.max_binding_range)
    fail("one vision tile needs {} bytes in one binding; this device binds at most {} (maxStorageBufferRange)", per_tile,
         ctx.max_binding_range);
  uint64_t chunk = std::min<uint64_t>(tiles, ctx.max_binding_range / per_tile);
  chunk = std::min<uint64_t>(chunk, ctx.max_workgroups[0] / S);  // one attention workgroup per row
  if (chunk == 0) fail("a vision tile of {} rows exceeds the device's workgroup grid", S);
  VisionWorkspace ws;
  ws.chunk_tiles = uint32_t(chunk);
  auto buffer = [&](uint64_t floats, const char* name) {
    return vk::Buffer(ctx, std::max<uint64_t>(floats, 1) * 4, vk::MemoryKind::Device, name);
  };
  ws.patches = buffer(chunk * N * 3 * c.patch_size * c.patch_size, "vision patches");
  ws.embedded = buffer((1 + chunk * N) * D, "vision embedded patches");
  ws.x = buffer(chunk * S * D, "vision x");
  ws.normed = buffer(chunk * S * D, "vision normed");
  ws.attn = buffer(chunk * S * D, "vision attention");
  ws.qkv = buffer(chunk * S * 3 * D, "vision qkv");
  ws.mlp = buffer(chunk * S * I, "vision mlp");
  ws.shuffled = buffer(chunk * N * D, "vision pixel shuffle");
  ws.adapter = buffer(chunk * N / 4 * (c.projector_input_dim + c.projector_output_dim), "vision adapter");
  // Row indices are the same for every chunk: tile t of a chunk always sits at rows t (N + 1).
  std::vector<int32_t> positions(chunk * S), assemble(chunk * S);
  for (uint64_t r = 0; r < chunk * S; ++r) {
    const uint64_t t = r / S, n = r % S;
    positions[r] = int32_t(n);
    assemble[r] = n < N ? int32_t(1 + t * N + n) : 0;  // embedded row 0 is the class embedding
  }
  std::vector<int32_t> shuffle = pixel_shuffle_rows(uint32_t(chunk), c.side());
  ws.positions = vk::Buffer(ctx, positions.size() * 4, vk::MemoryKind::Device, "vision positions");
  ws.assemble_rows = vk::Buffer(ctx, assemble.size() * 4, vk::MemoryKind::Device, "vision assemble rows");
  ws.shuffle_rows = vk::Buffer(ctx, shuffle.size() * 4, vk::MemoryKind::Device, "vision shuffle rows");
  vk::upload(ctx, ws.positions, positions.data(), positions.size() * 4);
  vk::upload(ctx, ws.assemble_rows, assemble.data(), assemble.size() * 4);
  vk::upload(ctx, ws.shuffle_rows, shuffle.data(), shuffle.size() * 4);
  return ws;
}

void record_llama4_vision(ops::OpContext& oc, const Llama4Vision& v, VisionWorkspace& ws, uint32_t first,
                          uint32_t count, ops::Act features) {
  const Llama4VisionConfig& c = v.config;
  if (count == 0 || count > ws.chunk_tiles) fail("vision pass of {} tiles (at most {})", count, ws.chunk_tiles);
  const uint32_t N = c.patches(), S = c.seq(), D = c.hidden, I = c.intermediate, R = count * S;
  const uint32_t tokens = count * N / 4, P1 = c.projector_input_dim, P2 = c.projector_output_dim;
  const float eps = c.norm_eps;
  // Always the tiled GEMM: a tile's features then do not depend on how many tiles share its
  // chunk (the matrix-vector path would take a chunk of one or two tiles' adapter rows).
  const ops::MatmulPath path = ops::MatmulPath::Tiled;
  ops::Act embedded(ws.embedded, D), x(ws.x, D), h(ws.normed, D), qkv(ws.qkv, 3 * D), attn(ws.attn, D),
      mlp(ws.mlp, I);

  // Patch embedding, the class token last in each tile, the positional embedding, the pre-norm.
  linear(oc, ops::Act(ws.patches, 3 * c.patch_size * c.patch_size), v.patch_embedding, embedded.row(1), count * N,
         false, path, "vision patch_embedding");
  ops::copy_rows(oc, ops::Act(v.class_embedding, D), embedded, 1, D, "vision class_embedding");
  ops::gather_rows(oc, embedded, 1 + count * N, ops::IntVec{ws.assemble_rows}, x, R, D, "vision assemble");
  ops::add_bias(oc, x, R, D, v.positional, S, false, "vision positional_embedding");
  ops::layer_norm(oc, x, v.pre_weight, v.pre_bias, x, R, D, eps, "vision layernorm_pre");

  const float scale = 1.0f / std::sqrt(float(c.head_dim));
  for (const Llama4VisionLayer& L : v.layers) {
    ops::layer_norm(oc, x, L.ln1_weight, L.ln1_bias, h, R, D, eps, "vision input_layernorm");
    linear(oc, h, L.qkv, qkv, R, false, path, "vision qkv");
    ops::add_bias(oc, qkv, R, D, L.q_bias, 1, false, "vision q_bias");
    ops::add_bias(oc, qkv.cols(D), R, D, L.k_bias, 1, false, "vision k_bias");
    ops::add_bias(oc, qkv.cols(2 * D), R, D, L.v_bias, 1, false, "vision v_bias");
    ops::rope(oc, qkv, R, 2 * c.heads, c.head_dim, ops::IntVec{ws.positions}, v.rope_table, S,
              ops::RopePairing::Interleaved);
    ops::vision_attention(oc, qkv, attn, R, S, c.heads, c.head_dim, scale);
    linear(oc, attn, L.o, x, R, /*accumulate=*/true, path, "vision o_proj");
    ops::add_bias(oc, x, R, D, L.o_bias, 1, false, "vision o_bias");
    ops::layer_norm(oc, x, L.ln2_weight, L.ln2_bias, h, R, D, eps, "vision post_attention_layernorm");
    linear(oc, h, L.fc1, mlp, R, false, path, "vision fc1");
    ops::add_bias(oc, mlp, R, I, L.fc1_bias, 1, /*gelu=*/true, "vision fc1_bias_gelu");
    linear(oc, mlp, L.fc2, x, R, true, path, "vision fc2");
    ops::add_bias(oc, x, R, D, L.fc2_bias, 1, false, "vision fc2_bias");
  }
  ops::layer_norm(oc, x, v.post_weight, v.post_bias, h, R, D, eps, "vision layernorm_post");

  // Pixel shuffle (dropping the class rows), adapter MLP with GELU after both layers, projector.
  ops::gather_rows(oc, h, R, ops::IntVec{ws.shuffle_rows}, ops::Act(ws.shuffled, D), count * N, D,
                   "vision pixel_shuffle");
  ops::Act shuffled(ws.shuffled, 4 * D), a1(ws.adapter, P1 + P2), a2 = a1.cols(P1);
  linear(oc, shuffled, v.adapter_fc1, a1, tokens, false, path, "vision adapter fc1");
  ops::gelu(oc, a1, tokens, P1, "vision adapter gelu1");
  linear(oc, a1, v.adapter_fc2, a2, tokens, false, path, "vision adapter fc2");
  ops::gelu(oc, a2, tokens, P2, "vision adapter gelu2");
  linear(oc, a2, v.projector, features.row(first * (N / 4)), tokens, false, path, "multi_modal_projector");
}

}  // namespace eaglevk::models
