// libFuzzer entry for safetensors (tests/fuzz/run_fuzz.sh safetensors): every input is tried as
// a whole .safetensors file (8-byte length, JSON header, data) and as the text of a
// model.safetensors.index.json. Each must parse or give an eaglevk::Error. libFuzzer hands over
// an exactly sized heap buffer, so ASan reports any read past it; reading the first and last
// byte of every tensor the parser accepted checks that its range lies inside the input, and the
// host conversions (to_f32 and the integer ones) read each accepted tensor whole.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <eaglevk/error.h>

#include "loader/safetensors.h"

using namespace eaglevk::loader;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto* bytes = reinterpret_cast<const std::byte*>(data);
  try {
    const ParsedFile file = parse_safetensors({bytes, size}, "fuzz.safetensors");
    unsigned checksum = 0;
    for (const TensorView& t : file.tensors) {
      if (t.bytes == 0) continue;
      checksum += static_cast<unsigned>(t.data[0]) + static_cast<unsigned>(t.data[t.bytes - 1]);
      // The host conversions, on whichever dtypes they take (the others throw).
      for (auto convert : {+[](const TensorView& v) { (void)to_f32(v); }, +[](const TensorView& v) { (void)to_i64(v); },
                           +[](const TensorView& v) { (void)to_i32(v); }, +[](const TensorView& v) { (void)to_bool(v); }}) {
        try {
          convert(t);
        } catch (const eaglevk::Error&) {
        }
      }
    }
    volatile unsigned sink = checksum;  // keeps the reads from being optimized away
    (void)sink;
  } catch (const eaglevk::Error&) {
  }
  try {
    parse_safetensors_index(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.index.json");
  } catch (const eaglevk::Error&) {
  }
  return 0;
}
