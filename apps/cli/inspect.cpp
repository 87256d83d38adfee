// `eaglevk inspect FILE|DIR`: what a checkpoint holds, without a GPU: architecture and sizes,
// parameters, tensor types with their bytes, the bytes the weights take on the device, tap
// layers and d2t for a draft, and every value the loader defaulted or recovered.
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include "apps/cli/commands.h"
#include "loader/gguf.h"
#include "loader/llama4_image.h"
#include "loader/llama4_image_prompt.h"
#include "loader/mmproj.h"
#include "loader/model_files.h"
#include "loader/quant.h"
#include "models/eagle3.h"
#include "models/llama4.h"
#include "models/llama4_vision.h"

namespace eaglevk::cli {
namespace {

struct InspectArgs {
  std::string path, mmproj;
  bool json = false;
};

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

// llama.cpp's vision file given on its own: what eaglevk reads of it, and the text width it needs.
int inspect_mmproj(const InspectArgs& a) {
  const loader::Llama4Mmproj m = loader::open_llama4_mmproj(a.path);
  std::map<std::string, TypeTotals> types;
  for (const auto& [name, t] : m.tensors) {
    TypeTotals& tt = types[std::string(loader::dtype_name(t.dtype))];
    ++tt.tensors;
    tt.parameters += uint64_t(t.numel());
    tt.bytes += t.bytes;
  }
  nlohmann::json out;
  out["path"] = a.path;
  out["format"] = "gguf";
  out["gguf_architecture"] = "clip";
  out["projector_type"] = "llama4";
  out["vision_config"] = m.vision_config;
  out["preprocessing"] = m.preprocessor_config;
  if (m.projection_dim) out["text_hidden_size"] = *m.projection_dim;
  for (const auto& [type, tt] : types)
    out["tensor_types"][type] = {{"tensors", tt.tensors}, {"parameters", tt.parameters}, {"bytes", tt.bytes}};
  if (a.json) {
    fmt::print("{}\n", out.dump(2));
    return 0;
  }
  fmt::print("{}: llama.cpp vision file (mmproj) for Llama-4: give it with --mmproj next to a Llama-4 text model{}\n",
             a.path, m.projection_dim ? fmt::format(" of hidden size {}", *m.projection_dim) : "");
  for (auto& [key, value] : m.vision_config.items()) fmt::print("  {:<26} {}\n", key, value.dump());
  fmt::print("  tensor types:\n");
  for (const auto& [type, tt] : types)
    fmt::print("    {:<7} {:>5} tensors {:>14} parameters {:>10.2f} MiB\n", type, tt.tensors, tt.parameters,
               double(tt.bytes) / (1 << 20));
  return 0;
}

int inspect_command(const InspectArgs& a) {
  if (loader::is_gguf_file(a.path) &&
      loader::GgufFile::open(a.path).header.get_string("general.architecture").value_or("") == "clip")
    return inspect_mmproj(a);
  loader::ModelFiles files = loader::open_model_files(a.path);
  if (!a.mmproj.empty()) loader::attach_llama4_mmproj(files, a.mmproj);
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
  out["path"] = a.path;
  out["format"] = files.format;
  if (!a.mmproj.empty()) out["mmproj"] = a.mmproj;
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
  if (a.json) {
    fmt::print("{}\n", out.dump(2));
    return 0;
  }
  fmt::print("{}: {} ({}{})\n", a.path, arch, files.format,
             files.gguf ? ", GGUF architecture " + out["gguf_architecture"].get<std::string>() : "");
  for (auto& [key, value] : out["config"].items()) fmt::print("  {:<26} {}\n", key, value.dump());
  fmt::print("  {:<26} {:.2f} M\n", "parameters", double(parameters) / 1e6);
  fmt::print("  {:<26} {:.2f} MiB in the file, {:.2f} MiB on the device\n", "weights", double(stored) / (1 << 20),
             double(on_device) / (1 << 20));
  if (routed_experts)
    fmt::print("  {:<26} {:.2f} MiB of that on the device, or in host memory read over the bus (--experts-in-host, "
               "or when only the rest fits the device)\n",
               "routed experts", double(routed_experts) / (1 << 20));
  fmt::print("  tensor types:\n");
  for (const auto& [type, tt] : types)
    fmt::print("    {:<7} {:>5} tensors {:>14} parameters {:>10.2f} MiB\n", type, tt.tensors, tt.parameters,
               double(tt.bytes) / (1 << 20));
  if (out.contains("draft")) {
    const auto& d = out["draft"];
    fmt::print("  draft head ({}): draft vocabulary {} of {}, target hidden {}, norm_before_residual {}\n",
               d["format"].get<std::string>(), d["draft_vocab_size"].get<int>(), d["target_vocab_size"].get<int>(),
               d["target_hidden_size"].get<int>(), d["norm_before_residual"].get<bool>());
    fmt::print("  tap layers {} ({})\n", d["aux_layers"].dump(), d["aux_layers_rule"].get<std::string>());
    if (d.contains("d2t"))
      fmt::print("  d2t: {} entries ({}), target ids {}..{}\n", d["d2t"]["entries"].get<size_t>(),
                 d["d2t"]["stored_as"].get<std::string>(), d["d2t"]["target_id_range"][0].get<int64_t>(),
                 d["d2t"]["target_id_range"][1].get<int64_t>());
  }
  if (out.contains("vision")) {
    const auto& v = out["vision"];
    if (v["usable"].get<bool>())
      fmt::print("  vision tower: usable ({} layers, width {}, {}-pixel tiles of {}-pixel patches, {} tokens per tile, up "
                 "to {} tiles + 1 global per image)\n",
                 v["layers"].get<int>(), v["hidden_size"].get<int>(), v["tile"].get<int>(), v["patch_size"].get<int>(),
                 v["tokens_per_tile"].get<int>(), v["max_tiles"].get<int>());
    else
      fmt::print("  vision tower: not usable: {}\n", v["reason"].get<std::string>());
  }
  for (const std::string& note : files.notes) fmt::print("  note: {}\n", note);
  return 0;
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App* sub = app.add_subcommand("inspect", "Describe a model folder or GGUF file (no GPU needed)");
  sub->footer("Example: eaglevk inspect assets/gguf/tiny-llama4/tiny-llama4-q4_k_m.gguf");
  sub->add_option("path", args->path, "model or draft folder, .gguf file or llama.cpp vision (mmproj) file")
      ->required();
  sub->add_option("--mmproj", args->mmproj, "llama.cpp's vision file (mmproj-*.gguf) to check with the model");
  sub->add_flag("--json", args->json, "print one JSON object");
  register_runner(sub, [args] { return inspect_command(*args); });
}

}  // namespace eaglevk::cli
