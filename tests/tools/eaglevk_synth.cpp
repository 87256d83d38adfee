// eaglevk-synth: writes a random-weight checkpoint with a real model's tensor shapes (see
// tests/support/synthetic.h), for benchmarks and manual runs at real dimensions.
//   eaglevk-synth KIND OUT_DIR [--layers N] [--moe-step N] [--tokenizer DIR] [--aux a,b,c]
//                 [--shard-mb N] [--seed N]
//   KIND: llama3-8b, llama4-scout, eagle3-8b, eagle3-scout, qwen3-tiny, eagle3-qwen3-tiny
//   eaglevk-synth llama3-8b-gguf|llama3-small-gguf OUT.gguf --tokenizer DIR [--layers N] [--seed N]
//   (an F16 GGUF for llama.cpp and eaglevk alike: tests/support/synthetic_gguf.h)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include <eaglevk/error.h>

#include "support/synthetic.h"
#include "support/synthetic_gguf.h"

int main(int argc, char** argv) {
  using namespace eaglevk::testing;
  auto usage = [] {
    std::fprintf(stderr,
                 "usage: eaglevk-synth KIND OUT_DIR [--layers N] [--moe-step N] [--tokenizer DIR] [--aux a,b,c] "
                 "[--shard-mb N] [--seed N]\n"
                 "  KIND: llama3-8b, llama4-scout, eagle3-8b, eagle3-scout, qwen3-tiny, eagle3-qwen3-tiny\n"
                 "       eaglevk-synth llama3-8b-gguf|llama3-small-gguf OUT.gguf --tokenizer DIR [--layers N] "
                 "[--seed N]\n");
    return 2;
  };
  if (argc < 3) return usage();
  if (std::string(argv[1]) == "llama3-8b-gguf" || std::string(argv[1]) == "llama3-small-gguf") {
    SynthGgufOptions o;
    o.small = std::string(argv[1]) == "llama3-small-gguf";
    try {
      for (int i = 3; i < argc; i += 2) {
        const std::string a = argv[i];
        if (i + 1 >= argc) return usage();
        if (a == "--layers") o.layers = uint32_t(std::stoul(argv[i + 1]));
        else if (a == "--tokenizer") o.tokenizer_dir = argv[i + 1];
        else if (a == "--seed") o.seed = std::stoull(argv[i + 1]);
        else return usage();
      }
      if (o.tokenizer_dir.empty()) {
        std::fprintf(stderr, "eaglevk-synth: %s needs --tokenizer DIR (tokenizer.json)\n", argv[1]);
        return 2;
      }
      auto t0 = std::chrono::steady_clock::now();
      const uint64_t bytes = write_synthetic_llama3_gguf(argv[2], o);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      fmt::print("{}: {} ({:.2f} GB of weights) in {:.1f} s\n", argv[2], argv[1], bytes / 1e9, s);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "eaglevk-synth: %s\n", e.what());
      return 1;
    }
    return 0;
  }
  SynthKind kind;
  if (!parse_synth_kind(argv[1], kind)) {
    std::fprintf(stderr, "eaglevk-synth: unknown kind '%s'\n", argv[1]);
    return usage();
  }
  SynthOptions o;
  try {
    for (int i = 3; i < argc; ++i) {
      std::string a = argv[i];
      if (i + 1 >= argc) return usage();
      std::string v = argv[++i];
      if (a == "--layers") o.layers = uint32_t(std::stoul(v));
      else if (a == "--moe-step") o.moe_step = uint32_t(std::stoul(v));
      else if (a == "--tokenizer") o.tokenizer_dir = v;
      else if (a == "--shard-mb") o.shard_bytes = std::stoull(v) << 20;
      else if (a == "--seed") o.seed = std::stoull(v);
      else if (a == "--aux") {
        for (size_t p = 0; p < v.size();) {
          size_t c = v.find(',', p);
          o.aux_layers.push_back(std::stoi(v.substr(p, c - p)));
          p = c == std::string::npos ? v.size() : c + 1;
        }
      } else return usage();
    }
    auto t0 = std::chrono::steady_clock::now();
    uint64_t bytes = write_synthetic_checkpoint(kind, argv[2], o);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    fmt::print("{}: {} ({:.2f} GB of weights) in {:.1f} s\n", argv[2], synth_kind_name(kind), bytes / 1e9, s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "eaglevk-synth: %s\n", e.what());
    return 1;
  }
  return 0;
}
