// `eaglevk inspect FILE|DIR`: what a checkpoint holds, without a GPU: architecture and sizes,
// parameters, tensor types with their bytes, the bytes the weights take on the device, tap
// layers and d2t for a draft, and every value the loader defaulted or recovered.
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <eaglevk/eaglevk.hpp>
#include <eaglevk/error.h>

#include "apps/cli/commands.h"
#include "loader/gguf.h"
#include "loader/mmproj.h"
#include "loader/quant.h"

namespace eaglevk::cli {
namespace {

struct InspectArgs {
  std::string path, mmproj;
  bool json = false;
};

struct TypeTotals {
  uint64_t tensors = 0, parameters = 0, bytes = 0;
};

// llama.cpp's vision file given on its own: what eaglevk reads of it, and the text width it needs.
int inspect_mmproj(const InspectArgs& a) {
  const loader::Llama4Mmproj m = loader::open_llama4_mmproj(a.path);
  std::map<std::string, TypeTotals> types;
  for (const auto& [name, t] : m.tensors) {
    TypeTotals& tt = types[std::string(loader::dtype_name(t.dtype))];
    ++tt.tensors;
    tt.parameters += uint64_t(t.numel());
    tt.bytes += t.bytes;
  }
  nlohmann::json out;
  out["path"] = a.path;
  out["format"] = "gguf";
  out["gguf_architecture"] = "clip";
  out["projector_type"] = "llama4";
  out["vision_config"] = m.vision_config;
  out["preprocessing"] = m.preprocessor_config;
  if (m.projection_dim) out["text_hidden_size"] = *m.projection_dim;
  for (const auto& [type, tt] : types)
    out["tensor_types"][type] = {{"tensors", tt.tensors}, {"parameters", tt.parameters}, {"bytes", tt.bytes}};
  if (a.json) {
    fmt::print("{}\n", out.dump(2));
    return 0;
  }
  fmt::print("{}: llama.cpp vision file (mmproj) for Llama-4: give it with --mmproj next to a Llama-4 text model{}\n",
             a.path, m.projection_dim ? fmt::format(" of hidden size {}", *m.projection_dim) : "");
  for (auto& [key, value] : m.vision_config.items()) fmt::print("  {:<26} {}\n", key, value.dump());
  fmt::print("  tensor types:\n");
  for (const auto& [type, tt] : types)
    fmt::print("    {:<7} {:>5} tensors {:>14} parameters {:>10.2f} MiB\n", type, tt.tensors, tt.parameters,
               double(tt.bytes) / (1 << 20));
  return 0;
}

int inspect_command(const InspectArgs& a) {
  if (loader::is_gguf_file(a.path) &&
      loader::GgufFile::open(a.path).header.get_string("general.architecture").value_or("") == "clip")
    return inspect_mmproj(a);
  const nlohmann::json out = api::describe_checkpoint(a.path, a.mmproj);
  if (a.json) {
    fmt::print("{}\n", out.dump(2));
    return 0;
  }
  fmt::print("{}: {} ({}{})\n", a.path, out["architecture"].get<std::string>(), out["format"].get<std::string>(),
             out.contains("gguf_architecture") ? ", GGUF architecture " + out["gguf_architecture"].get<std::string>() : "");
  if (out.contains("config"))
    for (auto& [key, value] : out["config"].items()) fmt::print("  {:<26} {}\n", key, value.dump());
  fmt::print("  {:<26} {:.2f} M\n", "parameters", out["parameters"].get<uint64_t>() / 1e6);
  fmt::print("  {:<26} {:.2f} MiB in the file, {:.2f} MiB on the device\n", "weights",
             out["bytes_in_file"].get<uint64_t>() / double(1 << 20), out["bytes_on_device"].get<uint64_t>() / double(1 << 20));
  if (out.contains("bytes_routed_experts"))
    fmt::print("  {:<26} {:.2f} MiB of that on the device, or in host memory read over the bus (--experts-in-host, "
               "or when only the rest fits the device)\n",
               "routed experts", out["bytes_routed_experts"].get<uint64_t>() / double(1 << 20));
  fmt::print("  tensor types:\n");
  if (out.contains("tensor_types"))
    for (auto& [type, tt] : out["tensor_types"].items())
      fmt::print("    {:<7} {:>5} tensors {:>14} parameters {:>10.2f} MiB\n", type, tt["tensors"].get<uint64_t>(),
                 tt["parameters"].get<uint64_t>(), tt["bytes"].get<uint64_t>() / double(1 << 20));
  if (out.contains("draft")) {
    const auto& d = out["draft"];
    fmt::print("  draft head ({}): draft vocabulary {} of {}, target hidden {}, norm_before_residual {}\n",
               d["format"].get<std::string>(), d["draft_vocab_size"].get<int>(), d["target_vocab_size"].get<int>(),
               d["target_hidden_size"].get<int>(), d["norm_before_residual"].get<bool>());
    fmt::print("  tap layers {} ({})\n", d["aux_layers"].dump(), d["aux_layers_rule"].get<std::string>());
    if (d.contains("d2t"))
      fmt::print("  d2t: {} entries ({}), target ids {}..{}\n", d["d2t"]["entries"].get<size_t>(),
                 d["d2t"]["stored_as"].get<std::string>(), d["d2t"]["target_id_range"][0].get<int64_t>(),
                 d["d2t"]["target_id_range"][1].get<int64_t>());
  }
  if (out.contains("vision")) {
    const auto& v = out["vision"];
    if (v["usable"].get<bool>())
      fmt::print("  vision tower: usable ({} layers, width {}, {}-pixel tiles of {}-pixel patches, {} tokens per tile, up "
                 "to {} tiles + 1 global per image)\n",
                 v["layers"].get<int>(), v["hidden_size"].get<int>(), v["tile"].get<int>(), v["patch_size"].get<int>(),
                 v["tokens_per_tile"].get<int>(), v["max_tiles"].get<int>());
    else
      fmt::print("  vision tower: not usable: {}\n", v["reason"].get<std::string>());
  }
  for (const auto& note : out["notes"]) fmt::print("  note: {}\n", note.get<std::string>());
  return 0;
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App* sub = app.add_subcommand("inspect", "Describe a model folder or GGUF file (no GPU needed)");
  sub->footer("Example: eaglevk inspect assets/gguf/tiny-llama4/tiny-llama4-q4_k_m.gguf");
  sub->add_option("path", args->path, "model or draft folder, .gguf file or llama.cpp vision (mmproj) file")
      ->required();
  sub->add_option("--mmproj", args->mmproj, "llama.cpp's vision file (mmproj-*.gguf) to check with the model");
  sub->add_flag("--json", args->json, "print one JSON object");
  register_runner(sub, [args] { return inspect_command(*args); });
}

}  // namespace eaglevk::cli
