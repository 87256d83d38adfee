#pragma once
// llama.cpp's vision file for Llama-4 (an "mmproj" GGUF: general.architecture `clip`,
// clip.projector_type `llama4`), the file GGUF users download next to the text model to give
// it images. llama.cpp keeps the vision tower out of the text GGUF; this translates the
// separate file the way model_files.h translates a text GGUF: a `vision_config` in
// config.json's shape and tensors under Hugging Face names (`vision_model.*`,
// `multi_modal_projector.*`), added to the text model's files, so that models/llama4_vision
// loads it exactly as it loads a Hugging Face checkpoint's tower.
//
// What the file does not carry comes from elsewhere:
// - the image token ids: a Hugging Face folder's config.json, or the text GGUF's vocabulary
//   (<|image_start|>, <|image_end|>, <|patch|>, as llama.cpp's mtmd looks them up);
// - the vision RoPE's theta: 10000 (Llama-4's, and what llama.cpp hard-codes);
// - the preprocessing: a preprocessor_config.json beside the text model when there is one,
//   else Llama4ImageProcessorFast's defaults (max_patches 16, no resize to the full canvas)
//   with the file's tile size, mean and std.
// Converters name the pre-MLP LayerNorm `v.blk.N.ln2` (llama.cpp through 2025) or, since
// gemma4's mapping shadowed Llama-4's, `v.blk.N.attn_post_norm`; both are
// post_attention_layernorm here (a file with both is refused).
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "loader/model_files.h"

namespace eaglevk::loader {

// The file on its own (what attach adds, and what `inspect` shows of it): its tensors under
// Hugging Face names (views into `file`), the vision_config they imply, the preprocessing it
// implies, and the text width it was made for (clip.vision.projection_dim, when present).
// Throws, naming the file, for anything but a complete Llama-4 vision file.
struct Llama4Mmproj {
  std::filesystem::path path;
  MappedFile file;
  std::map<std::string, TensorView, std::less<>> tensors;
  nlohmann::json vision_config;
  nlohmann::json preprocessor_config;
  std::optional<int64_t> projection_dim;
};
Llama4Mmproj open_llama4_mmproj(const std::filesystem::path& path);

// Adds the mmproj file's vision tower to `files` (a Llama-4 text model: a Hugging Face folder,
// whose own tower it replaces, or a GGUF file). Sets files.config's vision_config and image
// token ids, files.preprocessor_config when no preprocessor_config.json is beside the model,
// and files.mmproj. Throws, naming the file, for anything else: not a GGUF, another projector
// type, a text model that is not Llama-4 or whose vocabulary has no image tokens, a missing or
// misshapen tensor, sizes that disagree with each other or with the text model.
void attach_llama4_mmproj(ModelFiles& files, const std::filesystem::path& mmproj);

}  // namespace eaglevk::loader
