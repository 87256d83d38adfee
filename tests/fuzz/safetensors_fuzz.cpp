// libFuzzer entry for safetensors (tests/fuzz/run_fuzz.sh safetensors): every input is tried as
// a whole .safetensors file (8-byte length, JSON header, data) and as the text of a
// model.safetensors.index.json. Each must parse or give an eaglevk::Error. libFuzzer hands over
// an exactly sized heap buffer, so ASan reports any read past it; reading the first and last
// byte of every tensor the parser accepted checks that its range lies inside the input, and the
// host conversions (to_f32 and the integer ones) read each accepted tensor whole. The tensors are
// then read as an FP8 checkpoint and as each 4-bit layout (loader/fp8.h, loader/int4.h): pairing
// weights with scales and packed parts, and making the upload blocks of what was accepted.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <eaglevk/error.h>

#include "loader/fp8.h"
#include "loader/int4.h"
#include "loader/quant.h"
#include "loader/safetensors.h"

using namespace eaglevk::loader;

namespace {

// Every scheme's pairing on a copy of the parsed tensors, then the blocks of each weight it
// made (small ones: the input bounds their size anyway).
void quantized_checkpoints(const ParsedFile& file) {
  QuantScheme fp8_blocks{"compressed-tensors"};
  fp8_blocks.block_rows = 64, fp8_blocks.block_cols = 32;
  QuantScheme fp8_groups{"compressed-tensors"};
  fp8_groups.group_size = 32;
  std::vector<QuantScheme> schemes = {QuantScheme{"fbgemm_fp8"}, QuantScheme{"fp8"}, fp8_blocks, fp8_groups};
  for (const char* method : {"gptq", "awq", "compressed-tensors"}) {
    QuantScheme s{method};
    s.int4 = true;
    s.group_size = 32;
    s.zero_offset = std::string_view(method) == "gptq";
    schemes.push_back(s);
  }
  for (const QuantScheme& s : schemes) {
    try {
      Checkpoint ckpt;
      for (const TensorView& t : file.tensors) ckpt.tensors[t.name] = t;
      std::vector<std::string> notes;
      if (s.int4)
        attach_int4_weights(ckpt, s, "config.json", notes);
      else
        attach_fp8_scales(ckpt, s, "config.json", notes);
      for (const auto& [name, t] : ckpt.tensors) {
        if (!t.scale && !t.int4) continue;
        std::vector<std::byte> blocks;
        try {
          if (t.scale)
            fp8_rows_to_blocks(t, 0, t.shape[0], blocks);
          else
            int4_rows_to_blocks(t, 0, t.shape[0], blocks);
        } catch (const eaglevk::Error&) {
        }
        if (blocks.size() != upload_bytes(t) && !blocks.empty()) __builtin_trap();  // a size the uploads would not expect
      }
    } catch (const eaglevk::Error&) {
    }
  }
}

}  // namespace

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
    quantized_checkpoints(file);
  } catch (const eaglevk::Error&) {
  }
  try {
    parse_safetensors_index(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.index.json");
  } catch (const eaglevk::Error&) {
  }
  return 0;
}
