#pragma once
// What the CLI loads from a model folder: the weights, the tokenizer and the chat template.
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loader/chat_template.h"
#include "loader/tokenizer.h"
#include "models/target.h"
#include "runtime/ops/gpu.h"

namespace eaglevk::cli {

// The tiny trained model that ships with eaglevk (the demo).
std::filesystem::path bundled_model_dir();

struct LoadedModel {
  std::filesystem::path dir;
  models::TargetModel model;
  loader::Tokenizer tokenizer;
  std::optional<loader::ChatTemplate> chat;  // absent when the folder has no template
  std::string name() const { return dir.filename().string(); }
};

std::unique_ptr<ops::Gpu> open_gpu(const std::string& device);
LoadedModel load_model(const vk::Context& ctx, const std::filesystem::path& dir);

// Prompt ids: raw text with BOS, or a chat turn rendered with the template.
struct PromptSource {
  std::string text;        // -p, or the contents of -f
  bool chat = false;
  std::string system;
  std::vector<int32_t> ids;  // --prompt-ids: used as given
};
std::vector<int32_t> prompt_ids(const LoadedModel& m, const PromptSource& source);

std::vector<int32_t> parse_id_list(const std::string& csv);
std::string read_text_file(const std::filesystem::path& path);

}  // namespace eaglevk::cli
