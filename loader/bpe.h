#pragma once
// Byte-level BPE: the GPT-2 byte <-> unicode map and merging by rank. Internal to the
// tokenizer; tokenizer.h is the public interface.
#include <array>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace eaglevk::loader {

// Hash for unordered maps keyed by std::string that are looked up with string_view, so the
// hot path does not allocate a std::string per lookup.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename T>
using StringMap = std::unordered_map<std::string, T, StringHash, std::equal_to<>>;

// GPT-2's byte-level alphabet: every byte is shown as a printable code point, so vocabulary
// entries are readable strings ("Ġthe" is " the"). Returns the UTF-8 string for raw `bytes`.
std::string byte_level_encode(std::string_view bytes);
// The inverse: the raw bytes of a vocabulary string, or nullopt when a character in it is not
// in the byte-level alphabet (such a token is not a byte-level token).
std::optional<std::string> byte_level_decode(std::string_view token);

struct BpeMerge {
  uint32_t rank;   // position in the merges list: lower merges first
  int32_t result;  // id of the merged token
};

struct BpeModel {
  StringMap<int32_t> bytes_to_id;     // raw bytes of a vocabulary entry -> id
  std::array<int32_t, 256> byte_id{};  // id of each single-byte symbol, -1 when absent
  std::unordered_map<uint64_t, BpeMerge> merges;  // key: (left id << 32) | right id
  // Llama-3: a pre-token that is a whole vocabulary entry maps to it without merging (BPE
  // alone would not always reach that entry).
  bool ignore_merges = false;
  int32_t unk_id = -1;  // used for a byte without a symbol; otherwise that is an error
};

inline uint64_t merge_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// Appends the ids of one pre-token (raw bytes) to `out`.
void bpe_encode(const BpeModel& model, std::string_view bytes, std::vector<int32_t>& out);

// Memo of pre-token -> ids. Words repeat a lot in text, and merging is the costly step.
// Shared by all encode calls on one tokenizer, so it is locked.
struct BpeCache {
  std::mutex mutex;
  StringMap<std::vector<int32_t>> entries;
};
void bpe_encode_cached(const BpeModel& model, BpeCache& cache, std::string_view bytes,
                       std::vector<int32_t>& out);

}  // namespace eaglevk::loader
