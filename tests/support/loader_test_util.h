#pragma once
// Header-only helpers for the loader tests, which link only the loaders (no Vulkan, no
// eaglevk_test_support).
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include <eaglevk/error.h>

#include "loader/safetensors.h"

namespace eaglevk::testing {

// Expects an eaglevk::Error whose message contains `word`.
template <typename F>
void expect_error(F&& f, const std::string& word) {
  try {
    f();
    ADD_FAILURE() << "no eaglevk::Error thrown (expected one mentioning '" << word << "')";
  } catch (const eaglevk::Error& e) {
    EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << "message: " << e.what();
  }
}

// Random UTF-8 text of up to 39 characters drawn from ASCII, controls, Latin, combining marks,
// Cyrillic, Arabic, Devanagari, punctuation, CJK, Hangul, emoji and the supplementary planes
// (surrogates replaced by 'x': they are not characters).
inline std::string random_utf8_text(std::mt19937& rng) {
  static const std::vector<std::pair<char32_t, char32_t>> ranges = {
      {0x20, 0x7E}, {0x09, 0x0D}, {0xA0, 0x2FF}, {0x300, 0x36F}, {0x400, 0x4FF}, {0x600, 0x6FF}, {0x900, 0x97F},
      {0x2000, 0x206F}, {0x3000, 0x30FF}, {0x4E00, 0x9FFF}, {0xAC00, 0xD7A3}, {0x1F300, 0x1FAFF}, {0x10000, 0x10FFFF}};
  std::string text;
  for (int n = rng() % 40; n > 0; --n) {
    const auto& [lo, hi] = ranges[rng() % ranges.size()];
    char32_t c = lo + rng() % (hi - lo + 1);
    if (c >= 0xD800 && c <= 0xDFFF) c = 'x';
    if (c < 0x80) {
      text += static_cast<char>(c);
    } else if (c < 0x800) {
      text += static_cast<char>(0xC0 | (c >> 6));
      text += static_cast<char>(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      text += static_cast<char>(0xE0 | (c >> 12));
      text += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      text += static_cast<char>(0x80 | (c & 0x3F));
    } else {
      text += static_cast<char>(0xF0 | (c >> 18));
      text += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
      text += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      text += static_cast<char>(0x80 | (c & 0x3F));
    }
  }
  return text;
}

// Tensors over buffers the test owns, in a Checkpoint of no file (the quantized checkpoints'
// pairing tests build their parts this way).
struct FakeCheckpoint {
  std::vector<std::vector<std::byte>> buffers;
  loader::Checkpoint ckpt;
  FakeCheckpoint() { buffers.reserve(64); }  // views point into the buffers: no reallocation
  template <typename T>
  void add(const std::string& name, loader::DType dtype, std::vector<int64_t> shape, const std::vector<T>& v) {
    buffers.emplace_back(v.size() * sizeof(T));
    if (!v.empty()) std::memcpy(buffers.back().data(), v.data(), buffers.back().size());
    loader::TensorView t;
    t.name = name, t.dtype = dtype, t.shape = std::move(shape);
    t.data = buffers.back().data(), t.bytes = buffers.back().size(), t.file = "fake.safetensors";
    ckpt.tensors[name] = t;
  }
};

}  // namespace eaglevk::testing
