#include "loader/pretokenize.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

#include <eaglevk/error.h>

namespace eaglevk::loader {

// ---- UTF-8 ----------------------------------------------------------------------------------

Utf8Step next_utf8(std::string_view bytes) {
  // Table 3-7 of the Unicode standard (well-formed UTF-8 byte sequences). The second byte's
  // range depends on the lead byte; that is what rejects overlongs, surrogates and > U+10FFFF.
  const auto b0 = static_cast<unsigned char>(bytes[0]);
  if (b0 < 0x80) return {Utf8Status::Complete, 1};
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {Utf8Status::Invalid, 1};
  }
  for (size_t i = 1; i < need; ++i) {
    if (i >= bytes.size()) return {Utf8Status::Incomplete, i};
    const auto b = static_cast<unsigned char>(bytes[i]);
    const bool ok = i == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    // The maximal subpart is the valid prefix seen so far; the bad byte starts the next one.
    if (!ok) return {Utf8Status::Invalid, i};
  }
  return {Utf8Status::Complete, need};
}

size_t first_invalid_utf8(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    // ASCII fast path: most input is ASCII.
    if (static_cast<unsigned char>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const Utf8Step step = next_utf8(text.substr(pos));
    if (step.status != Utf8Status::Complete) return pos;
    pos += step.length;
  }
  return std::string_view::npos;
}

size_t append_utf8_lossy(std::string& out, std::string_view bytes, bool keep_incomplete_tail) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  size_t pos = 0;
  while (pos < bytes.size()) {
    const Utf8Step step = next_utf8(bytes.substr(pos));
    if (step.status == Utf8Status::Complete) {
      out.append(bytes.substr(pos, step.length));
    } else if (step.status == Utf8Status::Incomplete && keep_incomplete_tail) {
      return pos;
    } else {
      out.append(kReplacement);
    }
    pos += step.length;
  }
  return pos;
}

std::string sanitize_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  append_utf8_lossy(out, text, false);
  return out;
}

char32_t decode_code_point(std::string_view text, size_t pos, size_t* length) {
  // Callers walk text that may never have been validated (python_strip on chat content), so a
  // truncated or malformed sequence must not read past the end: like sanitize_utf8, it counts
  // as one U+FFFD spanning its maximal subpart, which is at least one byte and never more than
  // what is left.
  const Utf8Step step = next_utf8(text.substr(pos));
  if (length) *length = step.length;
  if (step.status != Utf8Status::Complete) return 0xFFFD;
  const auto b0 = static_cast<unsigned char>(text[pos]);
  const size_t n = step.length;
  char32_t c = n == 1 ? b0 : n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
  for (size_t i = 1; i < n; ++i) c = (c << 6) | (static_cast<unsigned char>(text[pos + i]) & 0x3F);
  return c;
}

bool is_unicode_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

bool is_python_space(char32_t c) {
  return is_unicode_whitespace(c) || (c >= 0x1C && c <= 0x1F);
}

std::string_view python_strip(std::string_view text) {
  size_t begin = 0;
  while (begin < text.size()) {
    size_t n;
    if (!is_python_space(decode_code_point(text, begin, &n))) break;
    begin += n;
  }
  size_t end = begin;  // end of the last non-space character
  for (size_t pos = begin; pos < text.size();) {
    size_t n;
    const bool space = is_python_space(decode_code_point(text, pos, &n));
    pos += n;
    if (!space) end = pos;
  }
  return text.substr(begin, end - begin);
}

std::string_view python_lstrip(std::string_view text) {
  size_t begin = 0;
  while (begin < text.size()) {
    size_t n;
    if (!is_python_space(decode_code_point(text, begin, &n))) break;
    begin += n;
  }
  return text.substr(begin);
}

std::string_view python_rstrip(std::string_view text) {
  const std::string_view left = python_lstrip(text);
  if (left.empty()) return text.substr(0, 0);
  const size_t offset = text.size() - left.size();
  return text.substr(0, offset + python_strip(left).size());
}

// ---- regex ----------------------------------------------------------------------------------

Regex compile_regex(const std::string& pattern) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  // UTF: patterns and subjects are UTF-8. UCP: \s, \w, \d and POSIX classes use Unicode
  // properties, as Oniguruma (which HF tokenizers uses) does for UTF-8 strings.
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (!code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    fail("PCRE2 cannot compile the pre-tokenizer regex {:?} at offset {}: {}", pattern, error_offset,
         reinterpret_cast<const char*>(message));
  }
  // JIT is a large speed-up; an interpreter fallback keeps working where JIT is unavailable.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return Regex{std::shared_ptr<void>(code, [](void* p) { pcre2_code_free(static_cast<pcre2_code*>(p)); }),
               pattern};
}

std::string escape_regex(std::string_view literal) {
  // \Q...\E quotes everything except a literal "\E", which is split out of the quoted span.
  std::string out = "\\Q";
  for (size_t i = 0; i < literal.size(); ++i) {
    if (literal.substr(i, 2) == "\\E") {
      out += "\\E\\\\E\\Q";
      ++i;
    } else {
      out += literal[i];
    }
  }
  out += "\\E";
  return out;
}

namespace {

struct MatchData {
  pcre2_match_data* data;
  explicit MatchData(const pcre2_code* code) : data(pcre2_match_data_create_from_pattern(code, nullptr)) {
    if (!data) fail("out of memory creating PCRE2 match data");
  }
  ~MatchData() { pcre2_match_data_free(data); }
  MatchData(const MatchData&) = delete;
  MatchData& operator=(const MatchData&) = delete;
};

// Finds the next non-empty match in subject[start..]. Returns false when there is none.
// `subject` must be valid UTF-8 (checked once per encode), so PCRE2's per-call UTF check,
// which would make splitting quadratic in the text length, is switched off.
bool next_match(const pcre2_code* code, MatchData& match, std::string_view subject, size_t start,
                size_t* match_begin, size_t* match_end) {
  while (start <= subject.size()) {
    uint32_t options = PCRE2_NO_UTF_CHECK;
    int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(subject.data()), subject.size(), start,
                         options, match.data, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      // The JIT's default stack is small; the interpreter uses the heap and is not limited so.
      rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(subject.data()), subject.size(), start,
                       options | PCRE2_NO_JIT, match.data, nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      fail("pre-tokenizer regex failed on a {}-byte piece: {}", subject.size(),
           reinterpret_cast<const char*>(message));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.data);
    if (ovector[1] > ovector[0]) {
      *match_begin = ovector[0];
      *match_end = ovector[1];
      return true;
    }
    // An empty match splits nothing (HF drops empty pieces); search again one character on.
    if (ovector[0] >= subject.size()) return false;
    size_t n;
    decode_code_point(subject, ovector[0], &n);
    start = ovector[0] + n;
  }
  return false;
}

}  // namespace

void split_by_regex(const Regex& regex, std::string_view text, Piece range, SplitBehavior behavior,
                    bool invert, std::vector<Piece>& out) {
  if (range.length == 0) return;
  const auto* code = static_cast<const pcre2_code*>(regex.code.get());
  // HF runs the regex on each piece alone, so anchors and look-arounds see the piece's ends.
  const std::string_view subject = text.substr(range.offset, range.length);
  MatchData match(code);

  // Parts that cover the piece, each flagged as a delimiter (match) or not.
  struct Part {
    size_t begin, end;
    bool is_match;
  };
  std::vector<Part> parts;
  size_t prev = 0, begin = 0, end = 0;
  while (prev < subject.size() && next_match(code, match, subject, prev, &begin, &end)) {
    if (begin > prev) parts.push_back({prev, begin, invert});
    parts.push_back({begin, end, !invert});
    prev = end;
  }
  if (prev < subject.size()) parts.push_back({prev, subject.size(), invert});

  // The behaviours, as HF's NormalizedString::split defines them.
  std::vector<Part> kept;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::Isolated:
      kept = parts;
      break;
    case SplitBehavior::Removed:
      for (const Part& p : parts)
        if (!p.is_match) kept.push_back(p);
      break;
    case SplitBehavior::MergedWithPrevious:
      for (const Part& p : parts) {
        if (p.is_match && !previous_match && !kept.empty()) kept.back().end = p.end;
        else kept.push_back(p);
        previous_match = p.is_match;
      }
      break;
    case SplitBehavior::MergedWithNext:
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (it->is_match && !previous_match && !kept.empty()) kept.back().begin = it->begin;
        else kept.push_back(*it);
        previous_match = it->is_match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    case SplitBehavior::Contiguous:
      for (size_t i = 0; i < parts.size(); ++i) {
        if (i > 0 && parts[i].is_match == previous_match) kept.back().end = parts[i].end;
        else kept.push_back(parts[i]);
        previous_match = parts[i].is_match;
      }
      break;
  }
  for (const Part& p : kept)
    if (p.end > p.begin) out.push_back({range.offset + p.begin, p.end - p.begin});
}

// ---- added tokens ---------------------------------------------------------------------------

void AddedTokenMatcher::add(const AddedTokenSpec& token) {
  if (token.content.empty()) return;  // HF ignores empty added tokens
  if (nodes.empty()) nodes.emplace_back();
  int32_t node = 0;
  for (char ch : token.content) {
    const auto byte = static_cast<unsigned char>(ch);
    auto& children = nodes[node].children;
    auto it = std::lower_bound(children.begin(), children.end(), byte,
                               [](const auto& child, unsigned char b) { return child.first < b; });
    if (it != children.end() && it->first == byte) {
      node = it->second;
    } else {
      const auto next = static_cast<int32_t>(nodes.size());
      children.insert(it, {byte, next});
      nodes.emplace_back();  // invalidates `children`; not used after this
      node = next;
    }
  }
  // The first token with this content wins, as in HF where the content maps to one id.
  if (nodes[node].token < 0) {
    nodes[node].token = static_cast<int32_t>(tokens.size());
    tokens.push_back(&token);
  }
}

namespace {

// Longest token whose content starts at text[pos]; -1 when none.
int32_t longest_match_at(const AddedTokenMatcher& matcher, std::string_view text, size_t pos,
                         size_t* length) {
  int32_t best = -1;
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    const auto& children = matcher.nodes[node].children;
    auto it = std::lower_bound(children.begin(), children.end(), byte,
                               [](const auto& child, unsigned char b) { return child.first < b; });
    if (it == children.end() || it->first != byte) break;
    node = it->second;
    if (matcher.nodes[node].token >= 0) {
      best = matcher.nodes[node].token;
      *length = i + 1 - pos;
    }
  }
  return best;
}

// Rust regex's Unicode \w, which HF uses for single_word boundaries.
bool is_word_char_at(std::string_view text, size_t pos, bool before) {
  static const Regex word = compile_regex("[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}]");
  if (before) {
    // Step back to the start of the previous character.
    do --pos;
    while (pos > 0 && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80);
  }
  size_t n;
  decode_code_point(text, pos, &n);
  const auto* code = static_cast<const pcre2_code*>(word.code.get());
  MatchData match(code);
  return pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data() + pos), n, 0,
                     PCRE2_NO_UTF_CHECK | PCRE2_ANCHORED, match.data, nullptr) > 0;
}

}  // namespace

void split_added_tokens(const AddedTokenMatcher& matcher, std::string_view text, Segment range,
                        std::vector<Segment>& out) {
  if (matcher.empty()) {
    if (range.length > 0) out.push_back(range);
    return;
  }
  const std::string_view piece = text.substr(range.offset, range.length);
  size_t start_offset = 0;  // end of the last accepted match
  size_t pos = 0;
  while (pos < piece.size()) {
    size_t length = 0;
    const int32_t index = longest_match_at(matcher, piece, pos, &length);
    if (index < 0) {
      ++pos;
      continue;
    }
    const AddedTokenSpec& token = *matcher.tokens[index];
    size_t start = pos, stop = pos + length;
    // Like aho-corasick's non-overlapping iteration in HF, a rejected match still consumes its
    // text: the search resumes after it.
    pos = stop;
    if (token.single_word) {
      const bool space_before = start == 0 || !is_word_char_at(piece, start, true);
      const bool space_after = stop == piece.size() || !is_word_char_at(piece, stop, false);
      if (!space_before || !space_after) continue;
    }
    if (token.lstrip) {
      // Swallow whitespace to the left, but never into the previous match.
      size_t s = start;
      while (s > start_offset) {
        size_t p = s - 1;
        while (p > 0 && (static_cast<unsigned char>(piece[p]) & 0xC0) == 0x80) --p;
        if (!is_unicode_whitespace(decode_code_point(piece, p, nullptr))) break;
        s = p;
      }
      start = s;
    }
    if (token.rstrip) {
      while (stop < piece.size()) {
        size_t n;
        if (!is_unicode_whitespace(decode_code_point(piece, stop, &n))) break;
        stop += n;
      }
      pos = stop;
    }
    if (start > start_offset) out.push_back({range.offset + start_offset, start - start_offset, -1});
    out.push_back({range.offset + start, stop - start, token.id});
    start_offset = stop;
  }
  if (start_offset < piece.size())
    out.push_back({range.offset + start_offset, piece.size() - start_offset, -1});
}

}  // namespace eaglevk::loader
