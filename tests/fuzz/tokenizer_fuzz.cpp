// libFuzzer entry for the tokenizer (tests/fuzz/run_fuzz.sh tokenizer). The first byte picks
// what the rest of the input is:
//   even: a tokenizer.json. Whatever loads encodes and decodes a fixed multilingual text.
//   odd:  text for the tiny Llama-3 tokenizer (assets/tiny-llama3, loaded once; its path comes
//         from EAGLEVK_FUZZ_TOKENIZER_DIR at build time), encoded raw (invalid UTF-8 must be
//         refused cleanly) and sanitized; the ids must decode back to the sanitized text, the
//         streaming decoder must agree with decode(), and the same bytes read as ids decode to
//         valid UTF-8 (a bad id is an error).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <eaglevk/error.h>

#include "loader/pretokenize.h"
#include "loader/tokenizer.h"

using namespace eaglevk::loader;

namespace {

constexpr std::string_view kSample =
    "Hello, world! It's 2024: naïve café — 東京 😀 <|begin_of_text|>  \n\t x+=1;  ";

const Tokenizer& tiny() {
  static const Tokenizer t = Tokenizer::load(EAGLEVK_FUZZ_TOKENIZER_DIR);
  return t;
}

void fuzz_tokenizer_json(std::string_view text) {
  try {
    const Tokenizer t = Tokenizer::from_json(text, {}, {}, "fuzz/tokenizer.json");
    const std::vector<int32_t> ids = t.encode(kSample, true);
    (void)t.decode(ids, false);
    (void)t.decode(ids, true);
  } catch (const eaglevk::Error&) {
  }
}

void fuzz_text(std::string_view text) {
  const Tokenizer& t = tiny();
  try {
    (void)t.encode(text, true);
  } catch (const eaglevk::Error&) {
    if (first_invalid_utf8(text) == std::string_view::npos) std::abort();  // valid text must encode
  }
  const std::string clean = sanitize_utf8(text);
  const std::vector<int32_t> ids = t.encode(clean, false);
  if (t.decode(ids) != clean) std::abort();  // byte-level BPE round-trips exactly
  StreamDecoder stream(t);
  std::string joined;
  for (int32_t id : ids) joined += stream.push(id);
  joined += stream.flush();
  if (joined != clean) std::abort();

  // The same bytes as token ids, valid or not.
  std::vector<int32_t> raw(text.size() / 4);
  if (!raw.empty()) std::memcpy(raw.data(), text.data(), raw.size() * 4);
  try {
    if (first_invalid_utf8(t.decode(raw)) != std::string_view::npos) std::abort();
  } catch (const eaglevk::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) fuzz_tokenizer_json(rest);
  else fuzz_text(rest);
  return 0;
}
