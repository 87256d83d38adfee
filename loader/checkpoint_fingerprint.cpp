#include "loader/checkpoint_fingerprint.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include <eaglevk/error.h>

#include "loader/gguf.h"
#include "loader/hf_config.h"
#include "loader/safetensors.h"
#include "loader/sha256.h"

namespace eaglevk::loader {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The files beside the weights that some loader reads (tokenizer, chat template, generation
// and image settings, quantization): a change to any of them can change what eval measures.
// config.json counts here only beside a GGUF file (llama4 and llama3 GGUF files take values
// from it); in a folder it is the config part.
constexpr const char* kSideFiles[] = {"generation_config.json", "tokenizer.json",        "tokenizer_config.json",
                                      "special_tokens_map.json", "chat_template.jinja",  "chat_template.json",
                                      "preprocessor_config.json", "processor_config.json", "hf_quant_config.json"};

void hash_side_files(CheckpointFingerprint& f, const fs::path& folder, bool with_config) {
  std::error_code ec;
  if (with_config && fs::is_regular_file(folder / "config.json", ec)) f.files["config.json"] = sha256_file(folder / "config.json");
  for (const char* name : kSideFiles)
    if (fs::is_regular_file(folder / name, ec)) f.files[name] = sha256_file(folder / name);
}

void hash_tensor(Sha256& h, const std::string& name, DType dtype, const std::vector<int64_t>& shape, uint64_t bytes) {
  h.field(name);
  h.field(dtype_name(dtype));
  h.field(uint64_t(shape.size()));
  for (int64_t d : shape) h.field(uint64_t(d));
  h.field(bytes);
}

// One weight file into the content digest: its size, then all of its bytes or the three
// samples (first, middle and last kContentSampleBytes) with their offsets. Not its name: a
// GGUF file renamed or copied under another name is the same checkpoint (a folder's shards
// come in name order, and the tensors part covers their layout).
void hash_content(Sha256& h, const MappedFile& file, bool whole) {
  h.field(uint64_t(file.size));
  const uint64_t sample = kContentSampleBytes;
  if (whole || file.size <= 3 * sample) {
    h.update(std::span<const std::byte>(file.data, file.size));
    return;
  }
  for (uint64_t start : {uint64_t(0), file.size / 2 - sample / 2, file.size - sample}) {
    h.field(start);
    h.update(std::span<const std::byte>(file.data + start, sample));
  }
}

void hash_weights(CheckpointFingerprint& f, std::vector<const MappedFile*> files, uint64_t whole_content_bytes) {
  std::sort(files.begin(), files.end(), [](const MappedFile* a, const MappedFile* b) { return a->path.filename() < b->path.filename(); });
  for (const MappedFile* file : files) f.weight_bytes += file->size;
  const bool whole = f.weight_bytes <= whole_content_bytes;
  f.content_scope = whole ? "whole" : "sampled";
  Sha256 h;
  for (const MappedFile* file : files) hash_content(h, *file, whole);
  f.content = h.hex();
}

void fingerprint_folder(CheckpointFingerprint& f, const fs::path& dir, uint64_t whole_content_bytes) {
  f.format = "safetensors";
  // Canonical: nlohmann's objects keep keys sorted and dump() writes no spaces, so a config
  // rewritten with another indentation or key order keeps its fingerprint.
  f.config = sha256_hex(json_field::read_file(dir / "config.json").dump());
  hash_side_files(f, dir, false);
  const Checkpoint ckpt = Checkpoint::open(dir);
  Sha256 h;
  for (const auto& [name, view] : ckpt.tensors) hash_tensor(h, name, view.dtype, view.shape, view.bytes);
  f.tensors = h.hex();
  f.tensor_count = ckpt.tensors.size();
  std::vector<const MappedFile*> files;
  for (const MappedFile& file : ckpt.files) files.push_back(&file);
  hash_weights(f, files, whole_content_bytes);
}

void fingerprint_gguf(CheckpointFingerprint& f, const fs::path& path, uint64_t whole_content_bytes) {
  f.format = "gguf";
  const GgufFile file = GgufFile::open(path);
  Sha256 config;
  for (const auto& [key, value] : file.header.metadata) {  // a map: by key
    config.field(key);
    config.field(uint64_t(value.type));
    config.field(uint64_t(value.element_type));
    // replace: a GGUF string need not be valid UTF-8, which dump() would otherwise throw on.
    config.field(value.value.dump(-1, ' ', false, json::error_handler_t::replace));
  }
  f.config = config.hex();
  hash_side_files(f, path.has_parent_path() ? path.parent_path() : fs::path("."), true);
  std::vector<const GgufTensorInfo*> tensors;
  for (const GgufTensorInfo& t : file.header.tensors) tensors.push_back(&t);
  std::sort(tensors.begin(), tensors.end(), [](const auto* a, const auto* b) { return a->name < b->name; });
  Sha256 h;
  for (const GgufTensorInfo* t : tensors) hash_tensor(h, t->name, t->dtype, t->shape(), t->bytes);
  f.tensors = h.hex();
  f.tensor_count = tensors.size();
  hash_weights(f, {&file.file}, whole_content_bytes);
}

std::string short_hex(const json& value) { return value.is_string() ? value.get<std::string>().substr(0, 12) + "..." : "?"; }

}  // namespace

CheckpointFingerprint fingerprint_checkpoint(const fs::path& path, uint64_t whole_content_bytes) {
  CheckpointFingerprint f;
  std::error_code ec;
  if (fs::is_directory(path, ec))
    fingerprint_folder(f, path, whole_content_bytes);
  else if (!fs::exists(path, ec))
    fail("'{}' does not exist (give a model folder or a .gguf file)", path.string());
  else if (is_gguf_file(path))
    fingerprint_gguf(f, path, whole_content_bytes);
  else
    fail("'{}' is neither a model folder nor a GGUF file", path.string());
  Sha256 all;
  for (const std::string* part : {&f.format, &f.config, &f.tensors, &f.content_scope, &f.content}) all.field(*part);
  for (const auto& [name, digest] : f.files) {
    all.field(name);
    all.field(digest);
  }
  all.field(f.tensor_count);
  all.field(f.weight_bytes);
  f.sha256 = all.hex();
  return f;
}

json fingerprint_json(const CheckpointFingerprint& f) {
  return {{"sha256", f.sha256},
          {"format", f.format},
          {"config", f.config},
          {"files", f.files},
          {"tensors", f.tensors},
          {"tensor_count", f.tensor_count},
          {"weight_bytes", f.weight_bytes},
          {"content_scope", f.content_scope},
          {"content", f.content}};
}

std::string fingerprint_record_problem(const json& record) {
  if (!record.is_object()) return "is not an object";
  for (const char* key : {"sha256", "format", "config", "tensors", "content_scope", "content"})
    if (!record.contains(key) || !record[key].is_string()) return fmt::format("has no '{}'", key);
  for (const char* key : {"tensor_count", "weight_bytes"})
    if (!record.contains(key) || !record[key].is_number_unsigned()) return fmt::format("has no '{}'", key);
  if (!record.contains("files") || !record["files"].is_object()) return "has no 'files'";
  return "";
}

std::string fingerprint_difference(const json& theirs, const json& ours) {
  if (const std::string problem = fingerprint_record_problem(theirs); !problem.empty())
    return "its recorded fingerprint " + problem;
  auto text = [](const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
  if (theirs["format"] != ours["format"])
    return fmt::format("its format differs ({} there, {} here)", text(theirs["format"]).substr(0, 20), text(ours["format"]));
  if (theirs["config"] != ours["config"])
    return ours["format"] == "gguf" ? "its GGUF metadata differs" : "its config.json differs";
  const json& a = theirs["files"];
  const json& b = ours["files"];
  for (const auto& [name, digest] : b.items()) {
    if (!a.contains(name)) return fmt::format("its {} is here but not there", name);
    if (a[name] != digest) return fmt::format("its {} differs", name);
  }
  for (const auto& [name, digest] : a.items())
    if (!b.contains(name)) return fmt::format("its {} is there but not here", name.substr(0, 60));
  if (theirs["tensors"] != ours["tensors"] || theirs["tensor_count"] != ours["tensor_count"])
    return fmt::format("its tensors differ in names, types or shapes ({} tensors there, {} here)",
                       theirs["tensor_count"].get<uint64_t>(), ours["tensor_count"].get<uint64_t>());
  if (theirs["weight_bytes"] != ours["weight_bytes"])
    return fmt::format("its weight files differ in size ({} bytes there, {} here)", theirs["weight_bytes"].get<uint64_t>(),
                       ours["weight_bytes"].get<uint64_t>());
  if (theirs["content_scope"] != ours["content_scope"])
    return fmt::format("its weights were hashed {} there and {} here", text(theirs["content_scope"]).substr(0, 20),
                       text(ours["content_scope"]));
  if (theirs["content"] != ours["content"])
    return fmt::format("its weights differ (sha256 {} there, {} here)", short_hex(theirs["content"]), short_hex(ours["content"]));
  if (theirs["sha256"] != ours["sha256"])
    return fmt::format("its fingerprint differs (sha256 {} there, {} here)", short_hex(theirs["sha256"]),
                       short_hex(ours["sha256"]));
  return "";
}

}  // namespace eaglevk::loader
