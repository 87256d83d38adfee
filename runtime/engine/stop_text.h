#pragma once
// Stop strings (`--stop`, the C API's stop_strings): generation ends at the first token whose
// text completes one of them, and the text handed on ends before it, as in llama.cpp's server
// and vLLM. Text that could still become a stop string is held back until it cannot.
#include <string>
#include <string_view>
#include <vector>

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

}  // namespace eaglevk::engine
