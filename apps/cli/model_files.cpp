#include "apps/cli/model_files.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/core.h>

#include <eaglevk/error.h>

#include "apps/cli/integer_flags.h"
#include "apps/cli/load_progress.h"
#include "apps/cli/usage.h"
#include "loader/chat_messages.h"
#include "loader/input_path.h"
#include "loader/text_file.h"

namespace eaglevk::cli {

std::filesystem::path bundled_model_dir() {
  if (const std::optional<std::string> dir = api::environment_switch("EAGLEVK_DEMO_MODEL"); dir && !dir->empty())
    return *dir;
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


api::LoadPlan plan_model(const api::Runtime& runtime, const std::filesystem::path& model, const api::LoadOptions& options) {
  api::LoadPlan plan = api::plan_load(runtime, model, options);
  for (const std::string& note : plan.notes) fmt::print(stderr, "eaglevk: {}\n", note);
  return plan;
}

void add_check_tensors_flags(CLI::App* sub, std::optional<bool>& check) {
  CLI::Option* on = sub->add_flag_callback("--check-tensors", [&check] { check = true; },
                                           "scan the weights for NaN and inf at load (default up to 256 MiB)");
  sub->add_flag_callback("--no-check-tensors", [&check] { check = false; }, "skip that scan")->excludes(on);
}

void add_experts_in_host_flags(CLI::App* sub, std::optional<bool>& in_host) {
  // One line of --help for both (the pages must fit a terminal): the negated name counts down.
  sub->add_flag_function(
      "--experts-in-host,!--no-experts-in-host", [&in_host](int64_t count) { in_host = count > 0; },
      "routed MoE experts in host memory, over the bus (default: if needed)");
}

std::shared_ptr<const api::Model> load_planned(const api::Runtime& runtime, api::LoadPlan plan) {
  LoadProgress progress(plan.memory.weights);
  return api::load_model(runtime, std::move(plan), progress.observer());
}

nlohmann::json expert_traffic_json(const api::Model& m, uint32_t verify_rows) {
  const api::ExpertTraffic t = api::expert_traffic(m, verify_rows);
  if (t.moe_layers == 0) return nullptr;
  nlohmann::json j = {{"test", "experts"},
                      {"in_host_memory", t.host_bytes > 0},
                      {"routed_expert_bytes", t.bytes},
                      {"host_bytes", t.host_bytes},
                      {"moe_layers", t.moe_layers},
                      {"experts", t.experts},
                      {"experts_per_token", t.experts_per_token},
                      {"bytes_per_expert", t.bytes_per_expert},
                      {"expert_bytes_per_token", t.bytes_per_token}};
  if (verify_rows) {
    j["verify_rows"] = verify_rows;
    j["expert_bytes_per_verify_pass_at_most"] = t.bytes_per_verify_pass_at_most;
  }
  return j;
}

std::string expert_traffic_line(const api::Model& m, uint32_t verify_rows) {
  const api::ExpertTraffic t = api::expert_traffic(m, verify_rows);
  if (t.moe_layers == 0) return {};
  std::string line = fmt::format(
      "routed experts: {} in {} memory; a token reads {} of them (top-{} of {} experts of {} in each of {} "
      "layers){}",
      engine::format_bytes(t.bytes), t.host_bytes ? "host" : "device", engine::format_bytes(t.bytes_per_token),
      t.experts_per_token, t.experts, engine::format_bytes(t.bytes_per_expert), t.moe_layers,
      t.host_bytes ? " over the bus" : "");
  if (verify_rows)
    line += fmt::format("; a {}-row verify pass at most {} (each expert its rows route to, once per layer)",
                        verify_rows, engine::format_bytes(t.bytes_per_verify_pass_at_most));
  return line;
}

void check_text_fits(const api::Model& m, std::string_view text, std::string_view where) {
  const uint64_t per_token = m.tokenizer.max_input_bytes_per_token(), context = m.planned_context;
  if (per_token && context && text.size() > context * per_token)
    fail("{}: {} bytes cannot fit in a context of {} tokens (a token of this tokenizer stands for at most {} bytes): "
         "too long to encode",
         where, text.size(), context, per_token);
}

std::vector<int32_t> prompt_ids(const api::Model& m, const PromptSource& source, std::string* text) {
  if (!source.ids.empty()) return source.ids;
  if (source.chat) {
    std::vector<loader::ChatMessage> messages;
    if (!source.system.empty()) messages.push_back({"system", source.system});
    messages.push_back({"user", source.text});
    // The rendered template carries BOS itself.
    const std::string rendered = api::apply_chat_template(m, messages, true);
    check_text_fits(m, rendered, "the chat prompt");
    if (text) *text = rendered;
    return api::tokenize(m, rendered, false);
  }
  check_text_fits(m, source.text, "the prompt");
  if (text) *text = source.text;
  return api::tokenize(m, source.text, true);
}

std::string context_advice(const api::Model& m, uint32_t context) {
  const uint32_t most = m.max_context();
  if (context >= most) return fmt::format("but the context holds {}, the most the model allows", context);
  return fmt::format("but the context holds {} (--ctx: the model allows up to {})", context, most);
}

void warn_unusual_roles(const std::vector<loader::ChatMessage>& messages, std::string_view source,
                        std::set<std::string>* warned) {
  std::set<std::string> here;
  if (!warned) warned = &here;
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (loader::is_known_chat_role(role) || !warned->insert(role).second) continue;
    fmt::print(stderr,
               "eaglevk: warning: {}: messages[{}] has the role '{}', none of {}: the template renders it as "
               "given\n",
               source, i, role.size() > 40 ? role.substr(0, 40) + "..." : role, loader::kKnownChatRoles);
  }
}

void check_image_folders(const std::vector<std::filesystem::path>& images, const std::vector<std::filesystem::path>& folders,
                         std::string_view source) {
  for (const std::filesystem::path& image : images)
    if (std::none_of(folders.begin(), folders.end(), [&](const auto& f) { return loader::path_is_inside(image, f); }))
      fail("{}: image '{}' lies outside the file's folder: an image from elsewhere needs --allowed-image-dir", source,
           image.string().substr(0, 200));
}

PreparedPrompt prepare_prompt(const api::Model& m, const PromptSource& source) {
  if (source.messages_file.empty() && source.images.empty()) {
    PreparedPrompt out;
    out.ids = prompt_ids(m, source, &out.text);
    return out;
  }
  std::vector<loader::ChatMessage> messages;
  std::vector<std::filesystem::path> image_paths;
  if (!source.messages_file.empty()) {
    if (!source.text.empty() || source.chat || !source.system.empty() || !source.ids.empty())
      fail("--messages holds the whole conversation: it cannot be combined with -p, -f, --chat, --system or "
           "--prompt-ids");
    if (!source.images.empty()) fail("--image cannot be combined with --messages: put the images in the messages");
    const std::filesystem::path file = source.messages_file;
    loader::ParsedChat chat = loader::parse_chat_messages_json(loader::read_text_file(file), file.parent_path(), file.string());
    // An empty list would render nothing, not even BOS.
    if (chat.messages.empty()) fail("{}: the conversation is empty: give at least one message", file.string());
    warn_unusual_roles(chat.messages, file.string());
    std::vector<std::filesystem::path> folders = {file.parent_path()};
    folders.insert(folders.end(), source.allowed_image_dirs.begin(), source.allowed_image_dirs.end());
    check_image_folders(chat.images, folders, file.string());
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
  if (!image_paths.empty() && !m.images) throw Error(m.no_images_reason, m.no_images_setting);
  std::string rendered = api::apply_chat_template(m, messages, true);
  check_text_fits(m, rendered, source.messages_file.empty() ? "the chat prompt" : source.messages_file);
  std::vector<int32_t> ids = api::tokenize(m, rendered, false);
  if (image_paths.empty()) {
    PreparedPrompt out;
    out.ids = std::move(ids);
    out.text = std::move(rendered);
    return out;
  }
  const auto start = std::chrono::steady_clock::now();
  std::vector<loader::RgbImage> images;
  for (const std::filesystem::path& path : image_paths) images.push_back(loader::load_image(path));
  api::ImagePrompt prompt = api::prepare_images(m, ids, images);
  PreparedPrompt out{prompt.ids, std::move(rendered), std::move(prompt)};
  out.image_seconds = engine::seconds_since(start);
  const uint32_t tiles = out.images->tiles;
  fmt::print(stderr, "eaglevk: {} image(s), {} tiles, {} image tokens: {:.1f} ms ({:.1f} ms per tile)\n",
             images.size(), tiles, out.images->images.patch_positions.size(), out.image_seconds * 1e3,
             out.image_seconds * 1e3 / std::max(tiles, 1u));
  return out;
}

void print_draft_taps(const api::ModelInfo& info, bool overridden) {
  if (info.draft_taps_default) return;
  const std::vector<uint32_t>& t = info.draft_taps;
  const std::vector<uint32_t>& d = info.default_taps;
  fmt::print(stderr, "eaglevk: draft taps layers {},{},{} ({}; the default would be {},{},{})\n", t[0], t[1], t[2],
             overridden ? "--aux-layers" : info.draft_taps_rule, d[0], d[1], d[2]);
}

std::vector<int32_t> parse_id_list(const std::string& csv, const char* flag) {
  std::vector<int32_t> ids;
  std::stringstream in(csv);
  std::string item;
  while (std::getline(in, item, ',')) ids.push_back(int32_t(parse_integer(item, flag, 0, INT32_MAX)));
  if (ids.empty()) usage_fail("{} is empty", flag);
  return ids;
}

}  // namespace eaglevk::cli
