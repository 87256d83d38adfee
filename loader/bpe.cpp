#include "loader/bpe.h"

#include <queue>

#include <eaglevk/error.h>

namespace eaglevk::loader {

namespace {

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes map to themselves, the other 68 bytes to
// U+0100 onwards in byte order.
struct ByteLevelTables {
  std::array<char32_t, 256> byte_to_char{};
  std::unordered_map<char32_t, unsigned char> char_to_byte;
  ByteLevelTables() {
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      byte_to_char[b] = printable ? static_cast<char32_t>(b) : next++;
      char_to_byte[byte_to_char[b]] = static_cast<unsigned char>(b);
    }
  }
};

const ByteLevelTables& tables() {
  static const ByteLevelTables t;
  return t;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    // The byte-level alphabet stays below U+0800; nothing longer is ever needed here.
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

}  // namespace

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char b : bytes) append_utf8(out, tables().byte_to_char[static_cast<unsigned char>(b)]);
  return out;
}

std::optional<std::string> byte_level_decode(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  const auto& map = tables().char_to_byte;
  for (size_t i = 0; i < token.size();) {
    // Byte-level characters are at most 2 bytes of UTF-8 (U+0021..U+0143).
    const auto b0 = static_cast<unsigned char>(token[i]);
    char32_t c;
    if (b0 < 0x80) {
      c = b0;
      i += 1;
    } else if ((b0 & 0xE0) == 0xC0 && i + 1 < token.size()) {
      c = ((b0 & 0x1F) << 6) | (static_cast<unsigned char>(token[i + 1]) & 0x3F);
      i += 2;
    } else {
      return std::nullopt;
    }
    auto it = map.find(c);
    if (it == map.end()) return std::nullopt;
    out += static_cast<char>(it->second);
  }
  return out;
}

void bpe_encode(const BpeModel& model, std::string_view bytes, std::vector<int32_t>& out) {
  if (bytes.empty()) return;
  if (model.ignore_merges) {
    if (auto it = model.bytes_to_id.find(bytes); it != model.bytes_to_id.end()) {
      out.push_back(it->second);
      return;
    }
  }

  // Symbols form a linked list over the byte positions; a merge keeps the left symbol (with
  // the merged id) and unlinks the right one.
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    bool alive;
  };
  const auto n = static_cast<int32_t>(bytes.size());
  std::vector<Symbol> symbols(n);
  for (int32_t i = 0; i < n; ++i) {
    const auto byte = static_cast<unsigned char>(bytes[i]);
    int32_t id = model.byte_id[byte];
    if (id < 0) {
      if (model.unk_id < 0)
        fail("tokenizer vocabulary has no symbol for byte 0x{:02X} and no unk_token", byte);
      id = model.unk_id;
    }
    symbols[i] = {id, i - 1, i + 1 < n ? i + 1 : -1, true};
  }
  if (n == 1) {
    out.push_back(symbols[0].id);
    return;
  }

  // Candidate merges, lowest rank first and leftmost first among equal ranks: the order HF's
  // BPE applies them in. Entries go stale as neighbours merge; they are checked when popped.
  struct Candidate {
    uint32_t rank;
    int32_t left, right;
    int32_t left_id, right_id, result;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto push_pair = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    auto it = model.merges.find(merge_key(symbols[left].id, symbols[right].id));
    if (it != model.merges.end())
      queue.push({it->second.rank, left, right, symbols[left].id, symbols[right].id, it->second.result});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i, i + 1);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[c.left];
    Symbol& right = symbols[c.right];
    if (!left.alive || !right.alive || left.next != c.right || left.id != c.left_id || right.id != c.right_id)
      continue;
    left.id = c.result;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.left;
    push_pair(left.prev, c.left);
    push_pair(c.left, left.next);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

void bpe_encode_cached(const BpeModel& model, BpeCache& cache, std::string_view bytes,
                       std::vector<int32_t>& out) {
  // Long pieces (runs of spaces, minified code) rarely repeat; caching them only costs memory.
  constexpr size_t kMaxCachedBytes = 64;
  constexpr size_t kMaxEntries = 1 << 16;
  if (bytes.size() > kMaxCachedBytes) {
    bpe_encode(model, bytes, out);
    return;
  }
  {
    std::lock_guard lock(cache.mutex);
    if (auto it = cache.entries.find(bytes); it != cache.entries.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out.size();
  bpe_encode(model, bytes, out);
  std::vector<int32_t> ids(out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
  std::lock_guard lock(cache.mutex);
  // A bounded cache: dropping everything at the limit is crude but keeps memory bounded
  // for servers fed arbitrary text, and refills quickly with the common words.
  if (cache.entries.size() >= kMaxEntries) cache.entries.clear();
  cache.entries.emplace(std::string(bytes), std::move(ids));
}

}  // namespace eaglevk::loader
