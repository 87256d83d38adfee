#pragma once
// What identifies a checkpoint's files, whatever path they are given by. `eaglevk eval` records
// the fingerprints of its target, draft and mmproj in its reports, shards and resume files, and
// eval-merge and eval --resume refuse files whose checkpoints differ: a draft replaced at the
// same path would otherwise mix two heads' acceptance into one report, and the same files given
// by two paths are the same checkpoint.
//
// A fingerprint has parts, compared one by one so that a mismatch names what changed:
// - config: SHA-256 of config.json as canonical JSON (keys sorted, no spaces) for a folder; of
//   the metadata (every key with its type and value, by key) for a GGUF file;
// - files: SHA-256 of each side file the loaders read (tokenizer.json, tokenizer_config.json,
//   generation_config.json, ... in the folder, or beside the GGUF file), by name;
// - tensors: SHA-256 of every tensor's name, element type, shape and byte size, by name, and
//   their count;
// - weight_bytes: the sizes of the weight files (safetensors shards, the GGUF file) added up;
// - content: SHA-256 of the weight files' bytes. Whole ("whole") when they add up to at most
//   kWholeContentBytes; otherwise ("sampled") the first, middle and last MiB of each file: a
//   retrained or edited head changes bytes everywhere, while reading a 16 GB target through
//   the hash on every run would cost more than the check is worth. The headers, sizes and
//   config catch the rest of what a sample misses.
// - sha256: of all of the above, one value for people to compare at a glance.
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace eaglevk::loader {

inline constexpr uint64_t kWholeContentBytes = uint64_t(64) << 20;
inline constexpr uint64_t kContentSampleBytes = uint64_t(1) << 20;

struct CheckpointFingerprint {
  std::string format;                        // "safetensors" or "gguf"
  std::string config;                        // SHA-256, hex
  std::map<std::string, std::string> files;  // side file name -> SHA-256 (only those present)
  std::string tensors;
  uint64_t tensor_count = 0;
  uint64_t weight_bytes = 0;
  std::string content_scope;                 // "whole" or "sampled"
  std::string content;
  std::string sha256;
};

// `path`: a model folder (config.json and safetensors) or a GGUF file (models and mmproj
// files alike). Fails naming the file when it cannot be read.
CheckpointFingerprint fingerprint_checkpoint(const std::filesystem::path& path,
                                             uint64_t whole_content_bytes = kWholeContentBytes);

nlohmann::json fingerprint_json(const CheckpointFingerprint& f);

// What is wrong with a recorded fingerprint ("has no 'content'"); empty when it has every part.
std::string fingerprint_record_problem(const nlohmann::json& record);

// How the recorded fingerprint `theirs` (fingerprint_json, read back from a file) differs from
// `ours`, as a clause about the checkpoint ("its config.json differs", "its weights differ
// (sha256 1f2e... there, 9a0b... here)"); empty when they agree.
std::string fingerprint_difference(const nlohmann::json& theirs, const nlohmann::json& ours);

}  // namespace eaglevk::loader
