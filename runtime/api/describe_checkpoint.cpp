// `eaglevk inspect`'s description of a checkpoint, from its files alone (no device): what the
// loaders read of it and what the models would make of it.
#include <algorithm>
#include <map>

#include <eaglevk/eaglevk.hpp>

#include "loader/llama4_image.h"
#include "loader/llama4_image_prompt.h"
#include "loader/mmproj.h"
#include "loader/model_files.h"
#include "loader/quant.h"
#include "models/eagle3.h"
#include "models/llama4.h"
#include "models/llama4_vision.h"

namespace eaglevk::api {
namespace {

struct TypeTotals {
  uint64_t tensors = 0, parameters = 0, bytes = 0;
};

// Bytes a tensor takes on the device: weights stay as stored (FP8 and 4-bit ones become blocks),
// 1-D tensors (norms) become f32, the rope factors and d2t are not weights.
uint64_t device_bytes(const loader::TensorView& t) {
  if (t.name == "rope_freqs.weight" || t.name.ends_with("rotary_emb.inv_freq") || t.name == "t2d") return 0;
  if (t.shape.size() == 1) return uint64_t(t.numel()) * 4;  // norms as f32, d2t as int32
  return loader::upload_bytes(t);
}

// Whether image prompts can run: the tower's config and tensors, real image token ids, the
// tokenizer's image tokens and the preprocessor's tile size. Every failure is the reason.
nlohmann::json vision_block(const loader::ModelFiles& files, const nlohmann::json& sizes) {
  std::string why;
  try {
    const uint32_t hidden = sizes.value("hidden_size", 0u);
    const int64_t vocab = sizes.value("vocab_size", int64_t(0));
    std::optional<models::Llama4VisionConfig> c = models::usable_llama4_vision(files, hidden, vocab, &why);
    if (c) {
      const loader::Llama4ImageConfig pre = loader::load_llama4_image_config(files);
      const loader::Llama4ImageTokens tokens = loader::load_llama4_image_tokens(files, loader::load_tokenizer(files));
      return {{"usable", true},         {"layers", c->layers},         {"hidden_size", c->hidden},
              {"tile", pre.tile},       {"patch_size", c->patch_size}, {"tokens_per_tile", tokens.tokens_per_tile},
              {"max_tiles", pre.max_patches}};
    }
  } catch (const Error& e) {
    why = e.what();
  }
  return {{"usable", false}, {"reason", why}};
}

}  // namespace

nlohmann::json describe_checkpoint(const std::filesystem::path& path, const std::filesystem::path& mmproj) {
  loader::ModelFiles files = loader::open_model_files(path);
  if (!mmproj.empty()) loader::attach_llama4_mmproj(files, mmproj);
  const nlohmann::json& c = files.config;
  std::string arch = c.contains("architectures") && c["architectures"].is_array() && !c["architectures"].empty()
                         ? c["architectures"][0].get<std::string>()
                         : (c.contains("speculators_model_type") ? "Eagle3Speculator" : "?");
  std::map<std::string, TypeTotals> types;
  uint64_t parameters = 0, stored = 0, on_device = 0, routed_experts = 0;
  for (const auto& [name, t] : files.checkpoint.tensors) {
    TypeTotals& tt = types[std::string(loader::dtype_name(t.dtype))];
    ++tt.tensors;
    tt.parameters += uint64_t(t.numel());
    // An FP8 weight's scale and a 4-bit weight's scales and zeros left the tensor list (loader/fp8.h,
    // loader/int4.h): their bytes count with the weight.
    const uint64_t file_bytes = t.bytes + (t.scale ? t.scale->tensor.bytes : 0) +
                                (t.int4 ? t.int4->scales.bytes + (t.int4->zeros ? t.int4->zeros->bytes : 0) : 0);
    tt.bytes += file_bytes;
    parameters += uint64_t(t.numel());
    stored += file_bytes;
    on_device += device_bytes(t);
    if (models::is_llama4_routed_expert(name)) routed_experts += device_bytes(t);
  }
  nlohmann::json out;
  out["path"] = path.string();
  out["format"] = files.format;
  if (!mmproj.empty()) out["mmproj"] = mmproj.string();
  out["architecture"] = arch;
  if (files.gguf) {
    out["gguf_architecture"] = files.gguf->get_string("general.architecture").value_or("");
    if (auto name = files.gguf->get_string("general.name")) out["name"] = *name;
    if (auto ft = files.gguf->get_int("general.file_type")) out["gguf_file_type"] = *ft;
  }
  const nlohmann::json& sizes = c.contains("text_config") ? c["text_config"]
                                : c.contains("transformer_layer_config") ? c["transformer_layer_config"]
                                                                         : c;
  for (const char* key : {"hidden_size", "intermediate_size", "intermediate_size_mlp", "num_hidden_layers",
                          "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size",
                          "max_position_embeddings", "num_local_experts", "num_experts_per_tok", "rope_theta",
                          "rope_scaling", "attention_chunk_size", "floor_scale"})
    if (sizes.contains(key) && !sizes[key].is_null()) out["config"][key] = sizes[key];
  out["parameters"] = parameters;
  out["bytes_in_file"] = stored;
  out["bytes_on_device"] = on_device;
  // Part of bytes_on_device, which --experts-in-host (or a device too small for the whole model)
  // keeps in host memory instead.
  if (routed_experts) out["bytes_routed_experts"] = routed_experts;
  for (const auto& [type, tt] : types)
    out["tensor_types"][type] = {{"tensors", tt.tensors}, {"parameters", tt.parameters}, {"bytes", tt.bytes}};
  const bool draft = arch == "LlamaForCausalLMEagle3" || c.contains("speculators_model_type") ||
                     (arch == "LlamaForCausalLM" && c.contains("draft_vocab_size"));
  if (draft) {
    models::Eagle3Config dc = models::load_eagle3_config(files);
    out["draft"] = {{"format", dc.format},
                    {"draft_vocab_size", dc.draft_vocab_size},
                    {"target_vocab_size", dc.target_vocab_size},
                    {"target_hidden_size", dc.target_hidden_size},
                    {"norm_before_residual", dc.norm_before_residual},
                    {"aux_layers", dc.aux_layers},
                    {"aux_layers_rule", dc.aux_layers.empty() ? "none given: the family default (2, L/2, L-3)"
                                                              : dc.aux_layers_rule}};
    if (const loader::TensorView* d2t = files.checkpoint.find("d2t")) {
      std::vector<int64_t> v = loader::to_i64(*d2t);
      // Target ids: GGUF stores them, safetensors stores offsets from the draft id.
      int64_t lo = INT64_MAX, hi = INT64_MIN;
      for (size_t i = 0; i < v.size(); ++i) {
        int64_t id = dc.format == "gguf" ? v[i] : int64_t(i) + v[i];
        lo = std::min(lo, id);
        hi = std::max(hi, id);
      }
      out["draft"]["d2t"] = {{"entries", v.size()},
                             {"stored_as", dc.format == "gguf" ? "absolute target ids" : "offsets"},
                             {"target_id_range", {lo, hi}}};
    }
  }
  if (!draft) out["vision"] = vision_block(files, sizes);
  out["notes"] = files.notes;
  return out;
}

}  // namespace eaglevk::api
