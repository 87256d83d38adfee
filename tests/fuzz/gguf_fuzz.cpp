// libFuzzer entry for the GGUF parser (`tests/fuzz/run_fuzz.sh gguf` builds and runs it). Every
// input must either parse or give an eaglevk::Error. libFuzzer hands over an exactly sized heap
// buffer, so AddressSanitizer reports any read past it; reading the first and last byte of
// every tensor the parser accepted checks that their ranges really lie inside the input.
#include <cstddef>
#include <cstdint>

#include <eaglevk/error.h>

#include "loader/gguf.h"

using namespace eaglevk::loader;

namespace {

// The typed accessors on every key: each returns a value or throws eaglevk::Error.
void read_every_key(const GgufHeader& h) {
  for (const auto& key : h.key_order) {
    auto attempt = [](auto&& get) {
      try {
        get();
      } catch (const eaglevk::Error&) {
      }
    };
    attempt([&] { h.get_int(key); });
    attempt([&] { h.get_float(key); });
    attempt([&] { h.get_bool(key); });
    attempt([&] { h.get_string(key); });
    attempt([&] { h.get_int_array(key); });
    attempt([&] { h.get_float_array(key); });
    attempt([&] { h.get_string_array(key); });
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto* bytes = reinterpret_cast<const std::byte*>(data);
  try {
    const GgufHeader h = parse_gguf({bytes, size}, "fuzz.gguf");
    unsigned checksum = 0;
    for (const auto& t : h.tensors) {
      const std::byte* begin = bytes + h.data_offset + t.offset;
      checksum += static_cast<unsigned>(begin[0]) + static_cast<unsigned>(begin[t.bytes - 1]);
    }
    volatile unsigned sink = checksum;  // keeps the reads from being optimized away
    (void)sink;
    read_every_key(h);
  } catch (const eaglevk::Error&) {
  }
  return 0;
}
