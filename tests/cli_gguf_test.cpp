// The CLI on GGUF files: targets and drafts from GGUF and safetensors in any combination give
// the plain greedy output of the same target; `inspect` describes files as gguf-py's dumps do;
// broken GGUF files give a clear message and exit status 1.
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "loader/gguf.h"
#include "support/golden.h"
#include "support/process.h"

namespace eaglevk::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

ProcessResult run_cli(const std::string& args, bool with_stderr = true) {
  return run_process(
      fmt::format("EAGLEVK_VALIDATE=1 {} {} {}", EAGLEVK_CLI, args, with_stderr ? "2>&1" : "2>/dev/null"));
}

std::string gguf(const std::string& pair, const std::string& stem) {
  return asset(fmt::format("gguf/{}/{}.gguf", pair, stem));
}

json first_json_line(const ProcessResult& r) { return json::parse(r.out.substr(0, r.out.find('\n'))); }

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag) {
    path = fs::temp_directory_path() / fmt::format("eaglevk-cli-gguf-{}-{}", tag, ::getpid());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

const char* kPromptIds = "4091,692,1360,2771,294,537,3465,112,330,459";  // golden prompt 0 of pair A, cut

// -m and -d from either format: the speculative tokens are the plain tokens of the same target.
TEST(CliGguf, TargetsAndDraftsInEveryCombinationAreLossless) {
  struct Case {
    std::string target, draft;
  };
  const std::vector<Case> cases = {
      {gguf("tiny-llama3", "tiny-llama3-q4_k_m"), gguf("tiny-llama3", "tiny-llama3-eagle3-q8_0")},
      {asset("tiny-llama3"), gguf("tiny-llama3", "tiny-llama3-eagle3-f32")},
      {gguf("tiny-llama3", "tiny-llama3-q8_0"), asset("tiny-llama3-eagle3")},
  };
  for (const Case& c : cases) {
    const std::string common = fmt::format("run -m {} --prompt-ids {} -n 20 --ignore-eos --json", c.target, kPromptIds);
    ProcessResult plain = run_cli(common, false);
    ASSERT_EQ(plain.code, 0) << c.target;
    ProcessResult spec = run_cli(fmt::format("{} -d {} -k 3", common, c.draft), false);
    ASSERT_EQ(spec.code, 0) << c.target << " + " << c.draft;
    json p = first_json_line(plain), s = first_json_line(spec);
    EXPECT_EQ(s["tokens"], p["tokens"]) << c.target << " + " << c.draft;
    EXPECT_EQ(s["tokens"].size(), 20u);
    EXPECT_GT(s["stats"]["mean_acceptance_length"].get<double>(), 1.5) << c.target << " + " << c.draft;
  }
  // The log says where the draft's tap ids came from.
  ProcessResult logged = run_cli(fmt::format("run -m {} -d {} --prompt-ids {} -n 4", gguf("tiny-llama3", "tiny-llama3-q4_k_m"),
                                             gguf("tiny-llama3", "tiny-llama3-eagle3-q8_0"), kPromptIds));
  ASSERT_EQ(logged.code, 0) << logged.out;
  EXPECT_NE(logged.out.find("draft taps layers 2,4,5 (GGUF eagle3 tap layers: the residual stream entering each layer"),
            std::string::npos)
      << logged.out;
  EXPECT_EQ(logged.out.find("validation error"), std::string::npos) << logged.out;
}

// Per-type tensor counts and element counts from gguf-py's dump of the same file.
std::map<std::string, std::pair<uint64_t, uint64_t>> dump_types(const std::string& dump) {
  std::ifstream in(dump);
  std::map<std::string, std::pair<uint64_t, uint64_t>> types;
  static const std::regex row(R"(^\s*\d+:\s+(\d+) \|[^|]+\| (\w+)\s+\| (\S+)$)");
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (!std::regex_match(line, m, row)) continue;
    auto& [tensors, elements] = types[m[2]];
    ++tensors;
    elements += std::stoull(m[1]);
  }
  return types;
}

TEST(CliGguf, InspectAgreesWithGgufPyDumps) {
  for (auto [pair, stem] : {std::pair{"tiny-llama3", "tiny-llama3-q4_k_m"}, std::pair{"tiny-llama3", "tiny-llama3-q4_0"},
                            std::pair{"tiny-llama4", "tiny-llama4-q4_k_m"}}) {
    ProcessResult r = run_cli(fmt::format("inspect {} --json", gguf(pair, stem)), false);
    ASSERT_EQ(r.code, 0) << stem;
    json j = json::parse(r.out);
    auto want = dump_types(asset(fmt::format("gguf/{}/dumps/{}.dump.txt", pair, stem)));
    ASSERT_FALSE(want.empty()) << stem;
    uint64_t params = 0;
    for (auto& [type, counts] : want) {
      ASSERT_TRUE(j["tensor_types"].contains(type)) << stem << " " << type << "\n" << j.dump(2);
      EXPECT_EQ(j["tensor_types"][type]["tensors"].get<uint64_t>(), counts.first) << stem << " " << type;
      EXPECT_EQ(j["tensor_types"][type]["parameters"].get<uint64_t>(), counts.second) << stem << " " << type;
      params += counts.second;
    }
    EXPECT_EQ(j["tensor_types"].size(), want.size()) << stem;
    EXPECT_EQ(j["parameters"].get<uint64_t>(), params) << stem;
    EXPECT_EQ(j["format"], "gguf");
  }
  // A GGUF draft: tap layers with the rule that read them, d2t as absolute ids.
  ProcessResult d = run_cli(fmt::format("inspect {}", gguf("tiny-llama3", "tiny-llama3-eagle3-q8_0")), false);
  ASSERT_EQ(d.code, 0);
  EXPECT_NE(d.out.find("LlamaForCausalLMEagle3 (gguf, GGUF architecture eagle3)"), std::string::npos) << d.out;
  EXPECT_NE(d.out.find("tap layers [2,4,5]"), std::string::npos) << d.out;
  EXPECT_NE(d.out.find("d2t: 1024 entries (absolute target ids)"), std::string::npos) << d.out;
  EXPECT_NE(d.out.find("Q8_0"), std::string::npos) << d.out;
  // A llama4 file alone: the defaults it took are listed.
  TempDir dir("inspect");
  fs::create_symlink(fs::absolute(gguf("tiny-llama4", "tiny-llama4-q4_k_m")), dir.path / "t.gguf");
  ProcessResult alone = run_cli(fmt::format("inspect {}", (dir.path / "t.gguf").string()), false);
  ASSERT_EQ(alone.code, 0) << alone.out;
  EXPECT_NE(alone.out.find("note: attention_chunk_size = 8192 (documented default"), std::string::npos) << alone.out;
  // A safetensors folder works too: the parameters of the F16 conversion less its 16 rope
  // factors (rope_freqs.weight, which the safetensors checkpoint does not have).
  ProcessResult folder = run_cli(fmt::format("inspect {} --json", asset("tiny-llama3")), false);
  ASSERT_EQ(folder.code, 0);
  uint64_t f16_params = 0;
  for (auto& [type, counts] : dump_types(asset("gguf/tiny-llama3/dumps/tiny-llama3-f16.dump.txt")))
    f16_params += counts.second;
  EXPECT_EQ(json::parse(folder.out)["parameters"].get<uint64_t>(), f16_params - 16);
}

void expect_clean_failure(const ProcessResult& r, const std::string& words) {
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("eaglevk: error:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(words), std::string::npos) << "expected '" << words << "' in: " << r.out;
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void write_all(const fs::path& p, const std::string& bytes) { std::ofstream(p, std::ios::binary) << bytes; }

// A copy of a GGUF file without the metadata key `key` (tensors unchanged).
void write_without_key(const std::string& src, const fs::path& dst, const std::string& key) {
  loader::GgufFile f = loader::GgufFile::open(src);
  std::vector<std::pair<std::string, loader::GgufValue>> metadata;
  for (const auto& k : f.header.key_order)
    if (k != key) metadata.emplace_back(k, *f.header.find(k));
  std::vector<loader::GgufTensorData> tensors;
  for (const auto& info : f.header.tensors) {
    loader::TensorView v = f.view(info);
    tensors.push_back({info.name, info.dtype, v.shape, v.span()});
  }
  loader::write_gguf(dst, metadata, tensors, f.header.alignment);
}

TEST(CliGguf, BrokenFilesExitWithAClearError) {
  TempDir dir("bad");
  const std::string target = read_all(gguf("tiny-llama3", "tiny-llama3-q4_0"));
  const fs::path t = dir.path / "t.gguf";
  auto run_target = [&](const std::string& bytes) {
    write_all(t, bytes);
    return run_cli(fmt::format("run -m {} -p hi -n 2", t.string()));
  };
  expect_clean_failure(run_target(target.substr(0, target.size() / 2)), "lies past the end of the file");
  expect_clean_failure(run_target(target.substr(0, 100)), "t.gguf");
  {
    std::string v2 = target;
    v2[4] = 2;
    expect_clean_failure(run_target(v2), "GGUF version 2 is not supported");
  }
  {
    std::string magic = target;
    magic[0] = 'X';
    expect_clean_failure(run_target(magic), "neither a model folder nor a GGUF file");
  }
  // An eagle3 draft without tap layer ids, through -d and through inspect.
  {
    write_without_key(gguf("tiny-llama3", "tiny-llama3-eagle3-q8_0"), dir.path / "d.gguf", "eagle3.target_layers");
    expect_clean_failure(run_cli(fmt::format("run -p hi -n 2 -d {}", (dir.path / "d.gguf").string())),
                         "an eagle3 GGUF must name its tap layers");
    expect_clean_failure(run_cli(fmt::format("inspect {}", (dir.path / "d.gguf").string())),
                         "an eagle3 GGUF must name its tap layers");
  }
  // --chat with a file that carries no chat template: the reason, not a crash. Plain prompts
  // still run.
  write_without_key(gguf("tiny-llama3", "tiny-llama3-q4_0"), dir.path / "nochat.gguf", "tokenizer.chat_template");
  expect_clean_failure(run_cli(fmt::format("run -m {} --chat -p hi -n 2", (dir.path / "nochat.gguf").string())),
                       "has no chat template (no tokenizer.chat_template key, no tokenizer_config.json)");
  EXPECT_EQ(run_cli(fmt::format("run -m {} -p hi -n 2", (dir.path / "nochat.gguf").string())).code, 0);
  // A target given as a draft, and a draft given as a target.
  expect_clean_failure(run_cli(fmt::format("run -p hi -n 2 -d {}", gguf("tiny-llama3", "tiny-llama3-q4_0"))), "draft");
  expect_clean_failure(run_cli(fmt::format("run -p hi -n 2 -m {}", gguf("tiny-llama3", "tiny-llama3-eagle3-q8_0"))),
                       "eagle3");
}

}  // namespace
}  // namespace eaglevk::testing
