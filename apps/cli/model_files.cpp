#include "apps/cli/model_files.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>

#include <fmt/core.h>

#include <eaglevk/error.h>

#include "apps/cli/usage.h"
#include "loader/chat_messages.h"
#include "loader/draft_verifier.h"
#include "loader/model_files.h"
#include "loader/text_file.h"
#include "runtime/engine/elapsed.h"
#include "runtime/engine/memory_plan.h"

namespace eaglevk::cli {

std::filesystem::path bundled_model_dir() {
  if (const char* dir = std::getenv("EAGLEVK_DEMO_MODEL")) return dir;
  // An installed eaglevk finds the model under <prefix>/share/eaglevk/assets, next to its
  // bin/; a build tree uses the source tree's assets/.
  std::error_code ec;
  std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    std::filesystem::path installed = exe.parent_path().parent_path() / "share" / "eaglevk" / "assets" / "tiny-llama3";
    if (std::filesystem::is_directory(installed, ec)) return installed;
  }
  return std::filesystem::path(EAGLEVK_SOURCE_DIR) / "assets" / "tiny-llama3";
}

std::unique_ptr<ops::Gpu> open_gpu(const std::string& device) {
  vk::ContextOptions options = vk::ContextOptions::from_env();
  if (!device.empty()) options.device = device;
  return std::make_unique<ops::Gpu>(options);
}

LoadedModel load_model(const vk::Context& ctx, const std::filesystem::path& path) {
  loader::ModelFiles files = loader::open_model_files(path);
  loader::Tokenizer tokenizer = loader::load_tokenizer(files);
  std::string chat_error;
  std::optional<loader::ChatTemplate> chat = loader::load_chat_template(files, tokenizer, &chat_error);
  for (const std::string& note : files.notes) fmt::print(stderr, "eaglevk: {}: {}\n", path.filename().string(), note);
  return LoadedModel{path,           models::load_target(ctx, files), std::move(tokenizer), std::move(chat),
                     std::move(chat_error), files.notes};
}

ContextPlan plan_context(const vk::Context& ctx, const std::filesystem::path& model, const std::string& draft,
                         uint32_t max_rows, uint32_t requested) {
  loader::ModelFiles target = loader::open_model_files(model);
  std::optional<loader::ModelFiles> head;
  if (!draft.empty()) {
    head = loader::open_model_files(draft);
    if (auto warning = loader::verifier_mismatch(head->config, target.config, model))
      fmt::print(stderr, "eaglevk: warning: {}\n", *warning);
  }
  engine::MemoryPlan plan = engine::plan_memory(ctx, target, head ? &*head : nullptr, max_rows);
  std::string note;
  uint32_t context = engine::choose_context(plan, requested, &note);
  if (!note.empty()) fmt::print(stderr, "eaglevk: {}\n", note);
  return {context, plan.weights, plan};
}

std::vector<int32_t> prompt_ids(const LoadedModel& m, const PromptSource& source) {
  if (!source.ids.empty()) return source.ids;
  if (source.chat) {
    if (!m.chat) fail("{}", m.chat_error);
    std::vector<loader::ChatMessage> messages;
    if (!source.system.empty()) messages.push_back({"system", source.system});
    messages.push_back({"user", source.text});
    // The rendered template carries BOS itself.
    return m.tokenizer.encode(m.chat->render(messages, true), false);
  }
  return m.tokenizer.encode(source.text, true);
}

PreparedPrompt prepare_prompt(ops::Gpu& gpu, const LoadedModel& m, const PromptSource& source) {
  if (source.messages_file.empty() && source.images.empty()) return {prompt_ids(m, source), std::nullopt};
  std::vector<loader::ChatMessage> messages;
  std::vector<std::filesystem::path> image_paths;
  if (!source.messages_file.empty()) {
    if (!source.text.empty() || source.chat || !source.system.empty() || !source.ids.empty())
      fail("--messages holds the whole conversation: it cannot be combined with -p, -f, --chat, --system or "
           "--prompt-ids");
    if (!source.images.empty()) fail("--image cannot be combined with --messages: put the images in the messages");
    const std::filesystem::path file = source.messages_file;
    loader::ParsedChat chat = loader::parse_chat_messages_json(loader::read_text_file(file), file.parent_path(), file.string());
    messages = std::move(chat.messages);
    image_paths = std::move(chat.images);
  } else {
    if (!source.chat) fail("--image needs --chat (the images go in the user turn, before the text) or --messages");
    if (!source.system.empty()) messages.push_back({"system", source.system});
    loader::ChatMessage user{"user", ""};
    for (const std::string& path : source.images) {
      user.parts.push_back({loader::ChatContentPart::Type::Image, "", path});
      image_paths.push_back(path);
    }
    user.parts.push_back({loader::ChatContentPart::Type::Text, source.text, {}});
    messages.push_back(std::move(user));
  }
  // Whether the model takes images at all comes first: it is the reason a user needs to hear.
  std::optional<engine::ImageSupport> support;
  if (!image_paths.empty()) {
    std::string why;
    support = engine::image_support(m.model, m.dir, m.tokenizer, &why);
    if (!support) fail("{}", why);
  }
  if (!m.chat) fail("{}", m.chat_error);
  std::vector<int32_t> ids = m.tokenizer.encode(m.chat->render(messages, true), false);
  if (image_paths.empty()) return {std::move(ids), std::nullopt};
  const auto start = std::chrono::steady_clock::now();
  std::vector<loader::RgbImage> images;
  for (const std::filesystem::path& path : image_paths) images.push_back(loader::load_image(path));
  engine::ImagePrompt prompt = engine::build_image_prompt(gpu, *support, ids, images);
  PreparedPrompt out{std::move(prompt.ids), std::move(prompt.images)};
  out.image_seconds = engine::seconds_since(start);
  out.image_tiles = uint32_t(out.images->patch_positions.size() / support->tokens.tokens_per_tile);
  fmt::print(stderr, "eaglevk: {} image(s), {} tiles, {} image tokens: {:.1f} ms ({:.1f} ms per tile)\n",
             images.size(), out.image_tiles, out.images->patch_positions.size(), out.image_seconds * 1e3,
             out.image_seconds * 1e3 / std::max(out.image_tiles, 1u));
  return out;
}

void print_draft_taps(const models::Eagle3Model& draft, int target_layers, bool overridden) {
  if (draft.aux_layers_default) return;
  std::vector<uint32_t> d = models::default_aux_layers(uint32_t(target_layers));
  fmt::print(stderr, "eaglevk: draft taps layers {},{},{} ({}; the default would be {},{},{})\n", draft.aux_layers[0],
             draft.aux_layers[1], draft.aux_layers[2], overridden ? "--aux-layers" : draft.config.aux_layers_rule, d[0],
             d[1], d[2]);
}

std::vector<int32_t> parse_id_list(const std::string& csv, const char* flag) {
  std::vector<int32_t> ids;
  std::stringstream in(csv);
  std::string item;
  while (std::getline(in, item, ',')) {
    try {
      size_t used = 0;
      long v = std::stol(item, &used);
      if (used != item.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument(item);
      ids.push_back(int32_t(v));
    } catch (const std::exception&) {
      usage_fail("{}: '{}' is not a non-negative integer", flag, item);
    }
  }
  if (ids.empty()) usage_fail("{} is empty", flag);
  return ids;
}

}  // namespace eaglevk::cli
