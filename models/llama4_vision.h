#pragma once
// The Llama-4 vision tower (Llama4VisionModel and multi_modal_projector): image tiles to
// image features at the text model's width, on the device (vision-spec.md §3). Per tile:
// unfolded 14x14 patches through a linear patch embedding, the class token appended last,
// a learned positional embedding, pre-LN encoder layers with LayerNorm, bidirectional
// attention with a 2-D RoPE and a GELU MLP (all linear layers with biases), a post-norm, the
// class token dropped, a 2x2 pixel shuffle, the adapter MLP and the projector.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "loader/model_files.h"
#include "models/weight_loading.h"

namespace eaglevk::models {

struct Llama4VisionConfig {
  uint32_t image_size = 0;  // the tile side t in pixels
  uint32_t patch_size = 0;
  uint32_t hidden = 0;      // D
  uint32_t heads = 0, head_dim = 0;
  uint32_t intermediate = 0;  // the encoder MLP's width, and 4 D after the pixel shuffle
  uint32_t layers = 0;
  float norm_eps = 1e-5f;
  float rope_theta = 10000;
  uint32_t projector_input_dim = 0, projector_output_dim = 0;
  uint32_t text_hidden = 0;
  // Image token ids (config.json's boi/eoi/image_token_index).
  int32_t image_start_id = -1, image_end_id = -1, patch_id = -1;

  uint32_t side() const { return image_size / patch_size; }  // patches per tile side
  uint32_t patches() const { return side() * side(); }      // N
  uint32_t seq() const { return patches() + 1; }             // N + the class token
  uint32_t tokens_per_tile() const { return patches() / 4; }  // after the 2x2 pixel shuffle
};

// The vision_config of a Llama4ForConditionalGeneration config.json, or the one an attached
// mmproj file gave (loader/mmproj.h); nullopt for a text-only checkpoint (Llama4ForCausalLM, a
// GGUF file without an mmproj). Unsupported values (a pixel shuffle ratio other than
// 0.5, a non-GELU activation, sizes that do not divide) are errors naming the field.
std::optional<Llama4VisionConfig> read_llama4_vision_config(const loader::ModelFiles& files, uint32_t text_hidden);

// The vision tower a checkpoint can run: its config when the tensors are there and the image
// token ids are real ids of the vocabulary; otherwise nullopt and the reason in `why` (a text
// checkpoint, a GGUF file without its mmproj, pair B's tiny-llama4 whose tower has placeholder ids).
std::optional<Llama4VisionConfig> usable_llama4_vision(const loader::ModelFiles& files, uint32_t text_hidden,
                                                       int64_t vocab, std::string* why);

struct Llama4VisionLayer {
  vk::Buffer ln1_weight, ln1_bias, ln2_weight, ln2_bias;  // f32 [D]
  DeviceMatrix qkv;                                       // [3 D, D]: q, k, v rows
  vk::Buffer q_bias, k_bias, v_bias, o_bias;              // f32 [D]
  DeviceMatrix o;                                         // [D, D]
  DeviceMatrix fc1;                                       // [I, D]
  vk::Buffer fc1_bias;                                    // f32 [I]
  DeviceMatrix fc2;                                       // [D, I]
  vk::Buffer fc2_bias;                                    // f32 [D]
};

struct Llama4Vision {
  Llama4VisionConfig config;
  DeviceMatrix patch_embedding;  // [D, 3 p p]
  vk::Buffer class_embedding;    // f32 [D]
  vk::Buffer positional;         // f32 [N + 1, D]
  vk::Buffer pre_weight, pre_bias, post_weight, post_bias;  // f32 [D]
  std::vector<Llama4VisionLayer> layers;
  DeviceMatrix adapter_fc1;      // [projector_input_dim, 4 D]
  DeviceMatrix adapter_fc2;      // [projector_output_dim, projector_output_dim]
  DeviceMatrix projector;        // [text hidden, projector_output_dim]
  vk::Buffer rope_table;         // [N + 1][head_dim / 2] (cos, sin): the 2-D RoPE per tile row
};

// Loads the tower's tensors (vision_model.*, multi_modal_projector.*) and marks them used.
Llama4Vision load_llama4_vision(const vk::Context& ctx, vk::Uploader& up, TensorUse& use, const Llama4VisionConfig& c);

// Host-side pieces, exposed for tests.
// [tiles][3][t][t] pixels to [tiles * N][3 p p] patch rows: patches row-major within a tile,
// each flattened channel-major (c, ky, kx), as the unfold-conv patch embedding reads them.
std::vector<float> unfold_patches(std::span<const float> pixels, uint32_t tiles, uint32_t tile, uint32_t patch);
// The (cos, sin) of every tile row's rotary pairs: pair j < hd/4 turns by (x + 1) f_j, pair
// j >= hd/4 by (y + 1) f_(j - hd/4), f_i = theta^(-2i / (hd/2)), for patch n at column
// x = n % side and row y = n / side; the class token (row N) is not turned.
std::vector<float> vision_rope_table(uint32_t side, uint32_t head_dim, float theta);
// Source rows of the 2x2 pixel shuffle, as a gather over [tiles][N + 1] encoder rows: output
// row 4 k + q of tile t (k = r * side/2 + c) is patch (2r + q/2, 2c + q%2) of that tile.
std::vector<int32_t> pixel_shuffle_rows(uint32_t tiles, uint32_t side);

// Activations of the tower for up to `chunk_tiles` tiles at a time: every buffer stays within
// one storage binding (a Scout tile's MLP rows alone are 13 MB).
struct VisionWorkspace {
  uint32_t chunk_tiles = 0;
  vk::Buffer patches;   // [chunk N, 3 p p]
  vk::Buffer embedded;  // [1 + chunk N, D]: the class embedding, then the patch embeddings
  vk::Buffer x, normed, attn;  // [chunk (N + 1), D]
  vk::Buffer qkv;              // [chunk (N + 1), 3 D]
  vk::Buffer mlp;              // [chunk (N + 1), I]
  vk::Buffer shuffled;         // [chunk N / 4, 4 D]
  vk::Buffer adapter;          // [chunk N / 4, 2 projector dims]
  vk::Buffer positions, assemble_rows, shuffle_rows;  // int32 [chunk (N + 1)], same, [chunk N]
};
VisionWorkspace make_vision_workspace(const vk::Context& ctx, const Llama4Vision& v, uint32_t tiles);

// Records the tower over tiles [first, first + count) (count <= chunk_tiles) whose unfolded
// patches the caller has put in ws.patches; their features go to rows
// [first * N/4, (first + count) * N/4) of `features` ([*, text hidden]).
void record_llama4_vision(ops::OpContext& oc, const Llama4Vision& v, VisionWorkspace& ws, uint32_t first,
                          uint32_t count, ops::Act features);

}  // namespace eaglevk::models
