#include "loader/dataset.h"

#include <algorithm>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include "loader/chat_messages.h"
#include "loader/input_path.h"
#include "loader/json_excerpt.h"
#include "loader/text_file.h"

namespace eaglevk::loader {
namespace {

// Returns an empty string when the line parsed into `item`, else the reason it did not.
std::string parse_line(const std::string& text, const std::filesystem::path& image_dir,
                       const std::vector<std::filesystem::path>& image_folders, DatasetItem& item) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    // parse_error, and out_of_range for a number past a double's range (4E9888882).
    return "invalid JSON: " + json_parse_error_text(e);
  }
  if (!j.is_object()) return "not a JSON object";
  if (j.contains("category")) {
    // SPEED-Bench and MT-bench categories are names; anything else would group results
    // under a made-up text.
    if (!j["category"].is_string()) return "'category' must be a string";
    item.category = j["category"].get<std::string>();
  }
  if (j.contains("prompt")) {
    if (!j["prompt"].is_string()) return "'prompt' must be a string";
    item.kind = DatasetItem::Kind::Prompt;
    item.prompt = j["prompt"].get<std::string>();
    if (item.prompt.empty()) return "'prompt' is empty";
    return "";
  }
  if (j.contains("turns")) {
    if (!j["turns"].is_array()) return "'turns' must be a list of strings";
    item.kind = DatasetItem::Kind::Turns;
    for (const auto& t : j["turns"]) {
      if (!t.is_string()) return "'turns' must be a list of strings";
      item.turns.push_back(t.get<std::string>());
    }
    if (item.turns.empty()) return "'turns' is empty";
    return "";
  }
  if (j.contains("messages")) {
    item.kind = DatasetItem::Kind::Messages;
    try {
      ParsedChat chat = parse_chat_messages(j["messages"], image_dir);
      item.messages = std::move(chat.messages);
      item.images = std::move(chat.images);
    } catch (const Error& e) {
      return std::string("'messages': ") + e.what();
    }
    if (item.messages.empty()) return "'messages' is empty";
    for (const std::filesystem::path& image : item.images)
      if (!image_folders.empty() && std::none_of(image_folders.begin(), image_folders.end(), [&](const auto& folder) {
            return path_is_inside(image, folder);
          })) {
        const std::string name = image.string();
        return fmt::format("image '{}' lies outside the dataset's folder and the folders allowed for images",
                           name.size() > 80 ? name.substr(0, 80) + "..." : name);
      }
    return "";
  }
  if (j.contains("conversations")) {
    const nlohmann::json& c = j["conversations"];
    if (!c.is_array()) return "'conversations' must be a list of {from, value} entries";
    item.kind = DatasetItem::Kind::Turns;
    for (const auto& e : c) {
      if (!e.is_object() || !e.contains("from") || !e.contains("value") || !e["from"].is_string() ||
          !e["value"].is_string())
        return "'conversations' must be a list of {from, value} entries with string values";
      const std::string from = e["from"].get<std::string>();
      if (from == "human" || from == "user") {
        item.turns.push_back(e["value"].get<std::string>());
      } else if (from == "system") {
        if (!item.turns.empty() || !item.system.empty()) return "'conversations': a system entry must come first";
        item.system = e["value"].get<std::string>();
      } else if (from != "gpt" && from != "assistant" && from != "chatgpt" && from != "bing" && from != "bard" &&
                 from != "model") {
        return "'conversations': unknown speaker '" + from.substr(0, 40) + "'";
      }
    }
    if (item.turns.empty()) return "'conversations' has no human turn";
    return "";
  }
  return "no 'prompt', 'turns', 'messages' or 'conversations' field";
}

}  // namespace

Dataset parse_dataset(const std::string& text, const std::string& source, bool strict,
                      const std::filesystem::path& image_dir, const std::vector<std::filesystem::path>& image_folders) {
  Dataset d;
  std::istringstream in(text);
  std::string line;
  size_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    DatasetItem item;
    item.line = number;
    std::string problem;
    try {
      problem = parse_line(line, image_dir, image_folders, item);
    } catch (const nlohmann::json::exception& e) {
      // Whatever the library throws on a value of an unexpected shape is this line's problem,
      // named with its file and line like the others, never an escape without them.
      problem = std::string("unexpected JSON: ") + e.what();
    }
    if (problem.empty()) {
      d.items.push_back(std::move(item));
    } else if (strict) {
      fail("{}:{}: {}", source, number, problem);
    } else {
      d.problems.push_back({number, problem});
    }
  }
  if (d.items.empty())
    fail("{}: the dataset yields no prompt ({} line(s) read, {} skipped)", source, number, d.problems.size());
  return d;
}

Dataset load_dataset(const std::filesystem::path& path, bool strict,
                     const std::vector<std::filesystem::path>& allowed_image_folders) {
  require_file(path, "dataset");  // a FIFO would block the read, a device never end
  std::vector<std::filesystem::path> image_folders = {path.parent_path()};
  image_folders.insert(image_folders.end(), allowed_image_folders.begin(), allowed_image_folders.end());
  return parse_dataset(read_text_file(path), path.string(), strict, path.parent_path(), image_folders);
}

}  // namespace eaglevk::loader
