// libFuzzer entry for config.json (tests/fuzz/run_fuzz.sh config): each input that is JSON is
// read as a Llama-3 config, a Llama-4 config, an EAGLE-3 draft config (original and speculators
// layouts), a generation_config.json and a quantization_config (with itself as a ModelOpt
// hf_quant_config.json). Each reader must return or give an eaglevk::Error;
// nlohmann exceptions escaping a reader are findings too (libFuzzer reports them as crashes).
#include <cstddef>
#include <cstdint>

#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include "loader/eagle3_config.h"
#include "loader/quantization_config.h"
#include "loader/hf_config.h"
#include "loader/llama4_config.h"

using namespace eaglevk::loader;

namespace {

template <typename F>
void attempt(F&& f) {
  try {
    f();
  } catch (const eaglevk::Error&) {
  }
}

void check_llama(const LlamaConfig& c) {
  // The RoPE table a model would build; head_dim is only bounded by int, so a hostile config
  // asks for gigabytes here: the loader's tensors would refuse it first, so skip those.
  if (c.head_dim <= 4096) attempt([&] { (void)rope_inv_freq(c.head_dim, c.rope_theta, c.rope_scaling); });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(data, data + size);
  } catch (const nlohmann::json::exception&) {
    return 0;
  }
  attempt([&] { check_llama(parse_llama_config(j, "config.json", {"LlamaForCausalLM", "LlamaForCausalLMEagle3"})); });
  attempt([&] { check_llama(parse_llama4_config(j, "config.json").base); });
  attempt([&] { check_llama(parse_eagle3_config(j, "config.json").layer); });
  attempt([&] { (void)parse_rope_scaling(j, "config.json"); });
  attempt([&] { (void)parse_quantization_config(j, "config.json", &j); });
  attempt([&] {
    LlamaConfig c;
    c.eos_token_ids = {1, 2};
    apply_generation_config(c, j, "generation_config.json");
  });
  return 0;
}
