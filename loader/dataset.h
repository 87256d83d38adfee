#pragma once
// Evaluation datasets: JSONL files whose lines hold a `prompt` (a string), `turns` (MT-bench
// style: user turns asked one after another in one conversation), `messages` (chat messages
// with roles; content a string or Hugging Face content parts, text and images, image paths
// relative to the dataset file) or ShareGPT `conversations` (`from`/`value` entries: the human
// turns are asked in order as `turns` are, a system entry becomes the system prompt, and the
// recorded answers are dropped, since the model gives its own). An optional `category` string
// groups the results (SPEED-Bench and MT-bench have one). Bad lines are reported with their
// line numbers.
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
  std::string system;  // a system prompt before the turns (ShareGPT), or empty
  std::vector<ChatMessage> messages;
  std::string category;  // empty: none given
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
// Image paths are relative to `image_dir` (load_dataset: the dataset file's folder). With
// `image_folders` given, a line whose image lies outside all of them (loader/input_path.h,
// path_is_inside) is a bad line; load_dataset confines images to the dataset's folder and
// `allowed_image_folders`.
Dataset load_dataset(const std::filesystem::path& path, bool strict,
                     const std::vector<std::filesystem::path>& allowed_image_folders = {});
Dataset parse_dataset(const std::string& text, const std::string& source, bool strict,
                      const std::filesystem::path& image_dir = {},
                      const std::vector<std::filesystem::path>& image_folders = {});

}  // namespace eaglevk::loader
