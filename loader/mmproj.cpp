#include "loader/mmproj.h"

#include <cmath>
#include <regex>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <eaglevk/error.h>

#include "loader/gguf.h"
#include "loader/hf_config.h"
#include "loader/input_path.h"
#include "loader/tokenizer.h"

namespace eaglevk::loader {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct NameRule {
  const char* gguf;
  const char* hf;
};
// llama.cpp's names (clip-impl.h's TN_* for the llama4 projector) -> Hugging Face's.
constexpr NameRule kGlobals[] = {
    {"v.patch_embd.weight", "vision_model.patch_embedding.linear.weight"},
    {"v.class_embd", "vision_model.class_embedding"},
    {"v.position_embd.weight", "vision_model.positional_embedding_vlm"},
    {"v.pre_ln.weight", "vision_model.layernorm_pre.weight"},
    {"v.pre_ln.bias", "vision_model.layernorm_pre.bias"},
    {"v.post_ln.weight", "vision_model.layernorm_post.weight"},
    {"v.post_ln.bias", "vision_model.layernorm_post.bias"},
    {"mm.model.mlp.1.weight", "vision_model.vision_adapter.mlp.fc1.weight"},
    {"mm.model.mlp.2.weight", "vision_model.vision_adapter.mlp.fc2.weight"},
    {"mm.model.fc.weight", "multi_modal_projector.linear_1.weight"},
};
// Under v.blk.N. -> under vision_model.model.layers.N.
constexpr NameRule kBlock[] = {
    {"ln1.weight", "input_layernorm.weight"},
    {"ln1.bias", "input_layernorm.bias"},
    {"ln2.weight", "post_attention_layernorm.weight"},
    {"ln2.bias", "post_attention_layernorm.bias"},
    {"attn_post_norm.weight", "post_attention_layernorm.weight"},
    {"attn_post_norm.bias", "post_attention_layernorm.bias"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_out.weight", "self_attn.o_proj.weight"},
    {"attn_out.bias", "self_attn.o_proj.bias"},
    {"ffn_up.weight", "mlp.fc1.weight"},
    {"ffn_up.bias", "mlp.fc1.bias"},
    {"ffn_down.weight", "mlp.fc2.weight"},
    {"ffn_down.bias", "mlp.fc2.bias"},
};

int64_t need_positive(const GgufHeader& h, const std::string& key) {
  auto v = h.get_int(key);
  if (!v) fail("{}: GGUF key '{}' is missing", h.label, key);
  if (*v <= 0 || *v > (int64_t(1) << 20)) fail("{}: GGUF key '{}' is {}, not a plausible size", h.label, key, *v);
  return *v;
}

bool is_llama4(const json& config) {
  if (!config.contains("architectures") || !config["architectures"].is_array()) return false;
  for (const json& a : config["architectures"])
    if (a == "Llama4ForCausalLM" || a == "Llama4ForConditionalGeneration") return true;
  return false;
}

bool is_vision_tensor(const std::string& name) {
  return name.rfind("vision_model.", 0) == 0 || name.rfind("multi_modal_projector.", 0) == 0;
}

// The tensor's Hugging Face name; empty when the file should not hold it.
std::string hf_name(const std::string& name, int64_t layers) {
  static const std::regex block_re(R"(v\.blk\.(\d{1,6})\.(.+))");
  std::smatch match;
  if (std::regex_match(name, match, block_re)) {
    if (std::stoll(match[1].str()) >= layers) return {};
    for (const NameRule& r : kBlock)
      if (match[2] == r.gguf) return fmt::format("vision_model.model.layers.{}.{}", match[1].str(), r.hf);
    return {};
  }
  for (const NameRule& r : kGlobals)
    if (name == r.gguf) return r.hf;
  return {};
}

}  // namespace

Llama4Mmproj open_llama4_mmproj(const fs::path& path) {
  if (std::string p = file_problem(path, "mmproj file"); !p.empty()) fail("{}", p);
  if (!is_gguf_file(path))
    fail_setting(Setting::VisionProjector, "{}: not a GGUF file (the vision file is llama.cpp's mmproj-*.gguf)",
                 path.string());
  GgufFile file = GgufFile::open(path);
  const GgufHeader& h = file.header;
  const std::string arch = h.get_string("general.architecture").value_or("");
  if (arch != "clip")
    fail("{}: general.architecture is '{}', not 'clip': this is not a vision (mmproj) file", h.label, arch);
  if (!h.get_bool("clip.has_vision_encoder").value_or(false))
    fail("{}: the file has no vision encoder (clip.has_vision_encoder is not true)", h.label);
  // Files that hold audio too name the vision projector separately.
  std::optional<std::string> projector = h.get_string("clip.vision.projector_type");
  if (!projector) projector = h.get_string("clip.projector_type");
  if (!projector) fail("{}: GGUF key 'clip.projector_type' is missing", h.label);
  if (*projector != "llama4")
    fail("{}: a '{}' vision projector; eaglevk runs Llama-4's ('llama4') only", h.label, *projector);

  Llama4Mmproj m;
  m.path = path;
  m.projection_dim = h.get_int("clip.vision.projection_dim");
  // The tensors, under Hugging Face names.
  const int64_t layers = need_positive(h, "clip.vision.block_count");
  std::map<std::string, TensorView, std::less<>>& tower = m.tensors;
  for (const GgufTensorInfo& info : h.tensors) {
    std::string hf = hf_name(info.name, layers);
    if (hf.empty()) fail("{}: unexpected tensor '{}' for a Llama-4 vision file", h.label, info.name);
    TensorView v = file.view(info);
    v.name = hf;
    // Older converters kept the patch embedding as the 4-D unfold kernel [D, 3, p, p].
    if (info.name == "v.patch_embd.weight" && v.shape.size() == 4) {
      if (v.shape[0] <= 0) fail("{}: tensor '{}' has an empty dimension", h.label, info.name);
      v.shape = {v.shape[0], v.numel() / v.shape[0]};
    }
    if (!tower.emplace(hf, std::move(v)).second)
      fail("{}: two tensors map to '{}' (ln2 and attn_post_norm of one layer?)", h.label, hf);
  }
  // Every tensor the tower needs, named as the file would name it (shapes are checked at load).
  for (const NameRule& r : kGlobals)
    if (!tower.count(r.hf)) fail("{}: tensor '{}' is missing", h.label, r.gguf);
  for (int64_t l = 0; l < layers; ++l)
    for (const NameRule& r : kBlock)
      if (std::string_view(r.gguf).rfind("attn_post_norm", 0) != 0 &&
          !tower.count(fmt::format("vision_model.model.layers.{}.{}", l, r.hf)))
        fail("{}: tensor 'v.blk.{}.{}' is missing", h.label, l, r.gguf);
  auto rows_of = [&](const char* hf, const char* gguf) {
    const TensorView& t = tower.at(hf);
    if (t.shape.size() != 2) fail("{}: tensor '{}' is not a matrix", h.label, gguf);
    return t.shape[0];
  };
  // The adapter's widths: fc1 is [projector_input_dim, 4 D], fc2 [projector_output_dim, projector_input_dim].
  const int64_t adapter_mid = rows_of("vision_model.vision_adapter.mlp.fc1.weight", "mm.model.mlp.1.weight");
  const int64_t adapter_out = rows_of("vision_model.vision_adapter.mlp.fc2.weight", "mm.model.mlp.2.weight");
  if (!h.get_bool("clip.use_gelu").value_or(true))
    fail("{}: clip.use_gelu is false, but Llama-4's vision tower uses the GELU", h.label);

  // The vision_config Hugging Face would have.
  json& v = m.vision_config;
  v["image_size"] = need_positive(h, "clip.vision.image_size");
  v["patch_size"] = need_positive(h, "clip.vision.patch_size");
  v["hidden_size"] = need_positive(h, "clip.vision.embedding_length");
  v["intermediate_size"] = need_positive(h, "clip.vision.feed_forward_length");
  v["num_hidden_layers"] = layers;
  v["num_attention_heads"] = need_positive(h, "clip.vision.attention.head_count");
  v["norm_eps"] = h.get_float("clip.vision.attention.layer_norm_epsilon").value_or(1e-5);
  const int64_t scale = need_positive(h, "clip.vision.projector.scale_factor");
  v["pixel_shuffle_ratio"] = 1.0 / double(scale);
  v["hidden_act"] = "gelu";
  v["projector_input_dim"] = adapter_mid;
  v["projector_output_dim"] = adapter_out;
  v["vision_output_dim"] = adapter_out;
  v["rope_theta"] = 10000.0;
  v["multi_modal_projector_bias"] = false;

  json& p = m.preprocessor_config;
  const int64_t tile = v["image_size"];
  p["size"] = {{"height", tile}, {"width", tile}};
  p["max_patches"] = 16;
  p["resize_to_max_canvas"] = false;
  p["resample"] = 2;
  p["image_mean"] = h.get_float_array("clip.vision.image_mean").value_or(std::vector<double>{0.5, 0.5, 0.5});
  p["image_std"] = h.get_float_array("clip.vision.image_std").value_or(std::vector<double>{0.5, 0.5, 0.5});
  m.file = std::move(file.file);
  return m;
}

void attach_llama4_mmproj(ModelFiles& files, const fs::path& path) {
  Llama4Mmproj m = open_llama4_mmproj(path);
  const std::string label = path.string();
  if (!is_llama4(files.config))
    fail("{}: a Llama-4 vision file goes with a Llama-4 text model, and {} is not one", label, files.source());
  const json& text = files.config.contains("text_config") ? files.config["text_config"] : files.config;
  const int64_t text_hidden = json_field::required_int(text, "hidden_size", files.source());
  if (m.projection_dim && *m.projection_dim != text_hidden)
    fail("{}: clip.vision.projection_dim {} differs from the text model's hidden size {} ({})", label,
         *m.projection_dim, text_hidden, files.source());

  // The image token ids: config.json's for a folder, the vocabulary's for a GGUF text file.
  if (files.format == "gguf" || !files.config.contains("boi_token_index")) {
    const Tokenizer tokenizer = load_tokenizer(files);
    for (auto [key, token] : {std::pair{"boi_token_index", "<|image_start|>"}, {"eoi_token_index", "<|image_end|>"},
                              {"image_token_index", "<|patch|>"}}) {
      auto id = tokenizer.token_id(token);
      if (!id)
        fail("{}: the text model's vocabulary has no {} token, so it cannot take image features (converted from a "
             "text-only checkpoint?)",
             files.source(), token);
      files.config[key] = *id;
    }
  }

  // The tower replaces a checkpoint's own.
  Checkpoint& ckpt = files.checkpoint;
  size_t replaced = 0;
  for (auto it = ckpt.tensors.begin(); it != ckpt.tensors.end();) {
    if (is_vision_tensor(it->first)) {
      it = ckpt.tensors.erase(it);
      ++replaced;
    } else {
      ++it;
    }
  }
  if (replaced)
    files.notes.push_back(fmt::format("the vision tower of {} replaces the checkpoint's own ({} tensors)",
                                      path.filename().string(), replaced));
  for (auto& [name, view] : m.tensors) ckpt.tensors.emplace(name, std::move(view));
  ckpt.files.push_back(std::move(m.file));

  files.config["vision_config"] = std::move(m.vision_config);
  if (!fs::exists(files.folder / "preprocessor_config.json")) {
    files.preprocessor_config = std::move(m.preprocessor_config);
    files.notes.push_back(fmt::format("image preprocessing: Llama-4's (max_patches 16) with the tile, mean and std of {}",
                                      path.filename().string()));
  }
  files.mmproj = path;
}

}  // namespace eaglevk::loader
