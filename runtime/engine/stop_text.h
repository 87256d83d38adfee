#pragma once
// Stop strings (`--stop`, the C API's stop_strings): generation ends at the first token whose
// text completes one of them, and the text handed on ends before it, as in llama.cpp's server
// and vLLM. Text that could still become a stop string is held back until it cannot.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "loader/tokenizer.h"

namespace eaglevk::engine {

class StopText {
 public:
  explicit StopText(std::vector<std::string> stops);

  // Takes the next piece of generated text; returns the text now safe to pass on. After a
  // stop string was found, stopped() is true and later pieces are dropped.
  std::string push(std::string_view piece);
  // The held-back rest, at the end of a generation that did not stop here.
  std::string flush();
  bool stopped() const { return stopped_; }
  bool empty() const { return stops_.empty(); }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

// Generated token ids in, the text to show out: whole UTF-8 characters with special tokens
// skipped (loader::StreamDecoder), ending before the first stop string (StopText). run, eval
// and the C API's session stream their output through it.
class GeneratedText {
 public:
  GeneratedText(const loader::Tokenizer& tokenizer, std::vector<std::string> stops)
      : decoder_(tokenizer, /*skip_special=*/true), stop_(std::move(stops)) {}

  std::string push(int32_t id) { return stop_.push(decoder_.push(id)); }
  // At the end of the generation: the bytes still held (nothing once a stop string ended it).
  std::string finish() { return stop_.stopped() ? std::string() : stop_.push(decoder_.flush()) + stop_.flush(); }
  bool stopped() const { return stop_.stopped(); }

 private:
  loader::StreamDecoder decoder_;
  StopText stop_;
};

}  // namespace eaglevk::engine
