#pragma once
// What the CLI loads from a model folder: the weights, the tokenizer and the chat template.
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loader/chat_template.h"
#include "loader/tokenizer.h"
#include "models/eagle3.h"
#include "models/target.h"
#include "runtime/engine/memory_plan.h"
#include "runtime/engine/prompt_images.h"
#include "runtime/ops/gpu.h"

namespace eaglevk::cli {

// The tiny trained model that ships with eaglevk (the demo).
std::filesystem::path bundled_model_dir();

struct LoadedModel {
  std::filesystem::path dir;  // the model folder or GGUF file
  models::TargetModel model;
  loader::Tokenizer tokenizer;
  std::optional<loader::ChatTemplate> chat;  // absent when the model has no usable template
  std::string chat_error;                    // why, when it is absent
  std::vector<std::string> notes;            // values the loader defaulted or recovered (GGUF)
  std::string name() const { return std::filesystem::is_directory(dir) ? dir.filename().string() : dir.stem().string(); }
};

std::unique_ptr<ops::Gpu> open_gpu(const std::string& device);
// A model folder or a GGUF file.
LoadedModel load_model(const vk::Context& ctx, const std::filesystem::path& path);

// The context to run with, decided before any weight is uploaded: the target (and draft)
// files' needs against the device's memory budget (runtime/engine/memory_plan.h). `requested`
// 0 takes the model's maximum when it fits and otherwise what fits, saying so on stderr; a
// requested context that cannot fit, or weights that cannot, are an error with both numbers.
struct ContextPlan {
  uint32_t context = 0;
  uint64_t weight_bytes = 0;  // target and draft, as the files hold them (the load's size)
  engine::MemoryPlan memory;  // what the context was chosen from
};
ContextPlan plan_context(const vk::Context& ctx, const std::filesystem::path& model, const std::string& draft,
                         uint32_t max_rows, uint32_t requested);

// Prompt ids: raw text with BOS, or a chat turn rendered with the template.
struct PromptSource {
  std::string text;        // -p, or the contents of -f
  bool chat = false;
  std::string system;
  std::vector<int32_t> ids;  // --prompt-ids: used as given
  std::vector<std::string> images;  // --image: in the user turn, before the text (needs chat)
  std::string messages_file;        // --messages: a whole conversation (Hugging Face chat format)
};
std::vector<int32_t> prompt_ids(const LoadedModel& m, const PromptSource& source);

// The prompt with its images: the rendered chat's image placeholders expanded into the
// images' token layouts, and the images' features computed on the device.
struct PreparedPrompt {
  std::vector<int32_t> ids;
  std::optional<engine::PromptImages> images;
  uint32_t image_tiles = 0;
  double image_seconds = 0;  // decoding, preprocessing and the vision tower (one submission)
};
PreparedPrompt prepare_prompt(ops::Gpu& gpu, const LoadedModel& m, const PromptSource& source);

// Logs the draft's tap layers and the rule they came from, when they are not the default.
void print_draft_taps(const models::Eagle3Model& draft, int target_layers, bool overridden);

// Comma-separated non-negative integers; a usage error naming `flag` otherwise.
std::vector<int32_t> parse_id_list(const std::string& csv, const char* flag);

}  // namespace eaglevk::cli
