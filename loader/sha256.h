#pragma once
// SHA-256 (FIPS 180-4), for fingerprints of checkpoints, datasets and templates
// (loader/checkpoint_fingerprint.h): the digest `sha256sum` prints and model hubs list for their
// files, so a recorded value can be checked by hand. Plain C++, no dependency.
#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

namespace eaglevk::loader {

struct Sha256 {
  std::array<uint32_t, 8> state = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::array<uint8_t, 64> block{};  // bytes not yet compressed
  size_t used = 0;                  // of `block`
  uint64_t length = 0;              // bytes hashed so far

  void update(std::span<const std::byte> bytes);
  void update(std::string_view text) { update(std::as_bytes(std::span(text.data(), text.size()))); }
  // A field of a structured digest: its length (8 bytes, little-endian), then its bytes, so that
  // ("ab", "c") and ("a", "bc") hash differently.
  void field(std::string_view text);
  void field(uint64_t value);
  // The digest as 64 lowercase hex digits; the state is spent afterwards.
  std::string hex();
};

std::string sha256_hex(std::string_view bytes);
// A file's bytes, read in pieces; fails with "cannot open PATH" or "cannot read PATH".
std::string sha256_file(const std::filesystem::path& path, uint64_t* size = nullptr);

}  // namespace eaglevk::loader
