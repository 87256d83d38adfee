#pragma once
// Evaluation datasets: JSONL files whose lines hold a `prompt` (a string), `turns` (MT-bench
// style: user turns asked one after another in one conversation) or `messages` (chat messages
// with roles; content a string or Hugging Face content parts, text and images, image paths
// relative to the dataset file). Bad lines are reported with their line numbers.
#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include "loader/chat_template.h"

namespace eaglevk::loader {

struct DatasetItem {
  enum class Kind { Prompt, Turns, Messages };
  size_t line = 0;  // 1-based line in the file
  Kind kind = Kind::Prompt;
  std::string prompt;
  std::vector<std::string> turns;
  std::vector<ChatMessage> messages;
  std::vector<std::filesystem::path> images;  // the messages' image parts, in prompt order
};

struct DatasetProblem {
  size_t line = 0;
  std::string message;
};

struct Dataset {
  std::vector<DatasetItem> items;
  std::vector<DatasetProblem> problems;  // lines that were skipped
};

// Blank lines are ignored. A bad line is skipped and listed in `problems`, or, when `strict`,
// throws an error naming its line. A file that yields no item is an error either way.
// Image paths are relative to `image_dir` (load_dataset: the dataset file's folder).
Dataset load_dataset(const std::filesystem::path& path, bool strict);
Dataset parse_dataset(const std::string& text, const std::string& source, bool strict,
                      const std::filesystem::path& image_dir = {});

}  // namespace eaglevk::loader
