#pragma once
// Text handling that comes before BPE: UTF-8 checks, the PCRE2 regex splits of the
// pre-tokenizer, and finding added (special) tokens in raw text. Internal to the tokenizer;
// tokenizer.h is the public interface.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace eaglevk::loader {

// ---- UTF-8 ----------------------------------------------------------------------------------

// Byte offset of the first byte that does not start a valid, complete UTF-8 sequence, or
// std::string_view::npos when `text` is valid (no overlongs, no surrogates, nothing past U+10FFFF).
size_t first_invalid_utf8(std::string_view text);

// How a byte sequence begins, for streaming: a complete valid character of `length` bytes, a
// prefix that more bytes could still complete, or an invalid sequence whose maximal subpart
// (the Unicode "U+FFFD substitution of maximal subparts" rule, as Rust's from_utf8_lossy and
// Python's decode(errors="replace") use) is `length` bytes long.
enum class Utf8Status { Complete, Incomplete, Invalid };
struct Utf8Step {
  Utf8Status status;
  size_t length;
};
Utf8Step next_utf8(std::string_view bytes);

// Appends `bytes` to `out`, each maximal invalid subpart replaced by U+FFFD. With
// `keep_incomplete_tail`, a trailing prefix that more bytes could complete is not written;
// the return value is the number of bytes consumed (always bytes.size() otherwise).
size_t append_utf8_lossy(std::string& out, std::string_view bytes, bool keep_incomplete_tail);

// `text` with every maximal invalid UTF-8 subpart replaced by U+FFFD.
std::string sanitize_utf8(std::string_view text);

// Decodes the code point at text[pos] (pos < text.size()) and its length in bytes. A malformed
// or truncated sequence decodes as U+FFFD over its maximal invalid subpart (as sanitize_utf8
// replaces it), so the length is at least 1 and never runs past the end of `text`.
char32_t decode_code_point(std::string_view text, size_t pos, size_t* length);

// Unicode White_Space, which Rust's char::is_whitespace (used by HF tokenizers for lstrip/rstrip).
bool is_unicode_whitespace(char32_t c);
// Python's str.isspace set, which Jinja's `trim` filter uses: White_Space plus U+001C..U+001F.
std::string_view python_strip(std::string_view text);
// The same set, one side only (str.lstrip() and str.rstrip()), and one code point.
std::string_view python_lstrip(std::string_view text);
std::string_view python_rstrip(std::string_view text);
bool is_python_space(char32_t c);

// ---- regex splitting (HF `Split` pre-tokenizer semantics) --------------------------------------

// A PCRE2 pattern compiled in UTF + UCP mode (JIT when available). Thread-safe to use.
struct Regex {
  std::shared_ptr<void> code;  // pcre2_code_8*, freed by the deleter
  std::string pattern;
};
// Throws eaglevk::Error when PCRE2 rejects the pattern, quoting PCRE2's message and offset.
Regex compile_regex(const std::string& pattern);
// A pattern that matches `literal` exactly (HF's {"String": ...} split patterns).
std::string escape_regex(std::string_view literal);

// What happens to the matched parts of a piece (HF SplitDelimiterBehavior).
enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

// Splits [begin, end) of valid UTF-8 `text` by `regex`, appending the resulting piece
// ranges to `out` as (offset, length). `invert` swaps matches and non-matches. Empty pieces
// are never produced.
struct Piece {
  size_t offset;
  size_t length;
};
void split_by_regex(const Regex& regex, std::string_view text, Piece range, SplitBehavior behavior,
                    bool invert, std::vector<Piece>& out);

// ---- added tokens --------------------------------------------------------------------------

struct AddedTokenSpec {
  int32_t id;
  std::string content;
  bool single_word = false;  // match only when not touching a word character on either side
  bool lstrip = false;       // the match swallows whitespace on its left
  bool rstrip = false;       // ... and on its right
  bool normalized = true;    // matched after normalization (there is never a normalizer here)
  bool special = false;
};

// Leftmost-longest matcher over added-token contents (a byte trie).
struct AddedTokenMatcher {
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;  // sorted by byte
    int32_t token = -1;                                        // index into `tokens`
  };
  std::vector<Node> nodes;
  std::vector<const AddedTokenSpec*> tokens;

  void add(const AddedTokenSpec& token);
  bool empty() const { return tokens.empty(); }
};

// A segment of input text: either plain text (token_id < 0) to be pre-tokenized, or an added
// token already resolved to its id.
struct Segment {
  size_t offset;
  size_t length;
  int32_t token_id;
};
// Splits `text` by the matcher as HF AddedVocabulary does: leftmost match, longest at that
// position; single_word/lstrip/rstrip applied. Text segments are appended with token_id -1.
void split_added_tokens(const AddedTokenMatcher& matcher, std::string_view text, Segment range,
                        std::vector<Segment>& out);

}  // namespace eaglevk::loader
