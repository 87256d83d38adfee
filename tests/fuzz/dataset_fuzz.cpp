// libFuzzer entry for the JSONL datasets of `eaglevk eval` (tests/fuzz/run_fuzz.sh dataset):
// every input is parsed leniently (bad lines listed) and strictly (the first bad line is an
// error). Either way the result is items, problems or an eaglevk::Error, and a strict parse
// that succeeds keeps exactly the lines the lenient one kept.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <eaglevk/error.h>

#include "loader/dataset.h"

using namespace eaglevk::loader;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  size_t lenient_items = 0;
  try {
    const Dataset d = parse_dataset(text, "fuzz.jsonl", false, "/images");
    lenient_items = d.items.size();
    if (d.items.empty()) std::abort();  // an empty result is an error, never an empty dataset
  } catch (const eaglevk::Error&) {
  }
  try {
    const Dataset d = parse_dataset(text, "fuzz.jsonl", true, "/images");
    if (d.items.size() != lenient_items || !d.problems.empty()) std::abort();  // strict keeps every line or fails
  } catch (const eaglevk::Error&) {
  }
  return 0;
}
