#include "loader/sha256.h"

#include <bit>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include <eaglevk/error.h>

namespace eaglevk::loader {
namespace {

constexpr uint32_t kRound[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

// One 64-byte block into the state (FIPS 180-4, 6.2.2).
void compress(std::array<uint32_t, 8>& h, const uint8_t* p) {
  uint32_t w[64];
  for (int t = 0; t < 16; ++t)
    w[t] = uint32_t(p[4 * t]) << 24 | uint32_t(p[4 * t + 1]) << 16 | uint32_t(p[4 * t + 2]) << 8 | uint32_t(p[4 * t + 3]);
  for (int t = 16; t < 64; ++t) {
    const uint32_t s0 = std::rotr(w[t - 15], 7) ^ std::rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
    const uint32_t s1 = std::rotr(w[t - 2], 17) ^ std::rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = w[t - 16] + s0 + w[t - 7] + s1;
  }
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
  for (int t = 0; t < 64; ++t) {
    const uint32_t t1 = hh + (std::rotr(e, 6) ^ std::rotr(e, 11) ^ std::rotr(e, 25)) + ((e & f) ^ (~e & g)) + kRound[t] + w[t];
    const uint32_t t2 = (std::rotr(a, 2) ^ std::rotr(a, 13) ^ std::rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    hh = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += hh;
}

}  // namespace

void Sha256::update(std::span<const std::byte> bytes) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  size_t n = bytes.size();
  length += n;
  if (used) {
    const size_t take = std::min(n, block.size() - used);
    std::memcpy(block.data() + used, p, take);
    used += take, p += take, n -= take;
    if (used < block.size()) return;
    compress(state, block.data());
    used = 0;
  }
  for (; n >= 64; p += 64, n -= 64) compress(state, p);
  std::memcpy(block.data(), p, n);
  used = n;
}

void Sha256::field(uint64_t value) {
  uint8_t le[8];
  for (int i = 0; i < 8; ++i) le[i] = uint8_t(value >> (8 * i));
  update(std::as_bytes(std::span(le)));
}

void Sha256::field(std::string_view text) {
  field(uint64_t(text.size()));
  update(text);
}

std::string Sha256::hex() {
  // Padding: 0x80, zeros to 56 bytes mod 64, the message length in bits (big-endian).
  const uint64_t bits = length * 8;
  block[used++] = 0x80;
  if (used > 56) {
    std::memset(block.data() + used, 0, 64 - used);
    compress(state, block.data());
    used = 0;
  }
  std::memset(block.data() + used, 0, 56 - used);
  for (int i = 0; i < 8; ++i) block[56 + i] = uint8_t(bits >> (56 - 8 * i));
  compress(state, block.data());
  used = 0;
  std::string out;
  for (uint32_t v : state) out += fmt::format("{:08x}", v);
  return out;
}

std::string sha256_hex(std::string_view bytes) {
  Sha256 h;
  h.update(bytes);
  return h.hex();
}

std::string sha256_file(const std::filesystem::path& path, uint64_t* size) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open {}", path.string());
  Sha256 h;
  std::string buffer(1 << 20, '\0');
  while (in.read(buffer.data(), std::streamsize(buffer.size())) || in.gcount() > 0)
    h.update(std::string_view(buffer.data(), size_t(in.gcount())));
  if (in.bad()) fail("cannot read {}", path.string());
  if (size) *size = h.length;
  return h.hex();
}

}  // namespace eaglevk::loader
