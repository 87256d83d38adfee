// eval's inputs are told apart by their fingerprints, not their paths, end to end through the
// CLI: a draft replaced at the same path (one weight byte, one config field) is refused by
// --resume and by eval-merge, naming the draft; the same dataset given by a relative and an
// absolute path resumes and merges; a dataset edited at the same path is refused.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "support/golden.h"
#include "support/process.h"

namespace eaglevk::testing {
namespace {

namespace fs = std::filesystem;

struct Workspace {
  fs::path dir;
  Workspace() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir = fs::temp_directory_path() / fmt::format("eaglevk-fingerprint-{}-{}", info->name(), ::getpid());
    fs::remove_all(dir);
    fs::create_directories(dir / "data");
    // Four prompt lines of the eval mix.
    std::ifstream in(std::string(EAGLEVK_SOURCE_DIR) + "/tests/data/eval_mix.jsonl");
    std::ofstream out(dir / "data" / "data.jsonl");
    std::string line;
    for (int i = 0; i < 4 && std::getline(in, line); ++i) out << line << "\n";
  }
  ~Workspace() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string path(const std::string& name) const { return (dir / name).string(); }
};

// Flips the lowest bit of the first byte of tensor `name` of a safetensors file: a BF16
// weight's last mantissa bit, a small change that keeps the draft loadable.
void flip_weight_bit(const fs::path& file, const std::string& name) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  uint64_t length = 0;
  f.read(reinterpret_cast<char*>(&length), 8);
  std::string header(length, '\0');
  f.read(header.data(), std::streamsize(length));
  const uint64_t at = 8 + length + nlohmann::json::parse(header).at(name).at("data_offsets")[0].get<uint64_t>();
  char c = 0;
  f.seekg(std::streamoff(at));
  f.read(&c, 1);
  c = char(c ^ 0x01);
  f.seekp(std::streamoff(at));
  f.write(&c, 1);
  ASSERT_TRUE(f.good()) << file;
}

nlohmann::json read_json(const std::string& p) { return nlohmann::json::parse(std::ifstream(p)); }

TEST(EvalFingerprint, DraftReplacedAtTheSamePathIsRefused) {
  const Workspace w;
  const fs::path draft = w.dir / "draft";
  fs::copy(asset("tiny-llama3-eagle3"), draft);
  for (const auto& f : fs::directory_iterator(draft)) fs::permissions(f.path(), fs::perms::owner_write, fs::perm_options::add);
  const std::string eval = fmt::format("eval -d {} --dataset {} -k 3 -n 4", draft.string(), w.path("data/data.jsonl"));
  const std::string resume = w.path("r0.jsonl");

  CliResult first = run_cli_apart(fmt::format("{} --shard 0/2 --resume {} --json {}", eval, resume, w.path("s0.json")));
  ASSERT_EQ(first.code, 0) << first.err;
  const nlohmann::json recorded = read_json(w.path("s0.json"))["config"]["fingerprints"]["draft"];
  EXPECT_EQ(recorded["format"], "safetensors");
  EXPECT_EQ(recorded["content_scope"], "whole");

  // One bit of one weight.
  flip_weight_bit(draft / "model.safetensors", "norm.weight");
  const std::string replaced = fmt::format(
      "the draft's fingerprint differs although its path {} is the same (replaced at the same path?): its weights "
      "differ (sha256 ",
      draft.string());
  CliResult refused = run_cli_apart(fmt::format("{} --shard 0/2 --resume {}", eval, resume));
  EXPECT_EQ(refused.code, 1) << refused.err;
  EXPECT_NE(refused.err.find(fmt::format("eaglevk: error: --resume {} was written by another configuration: {}", resume, replaced)),
            std::string::npos)
      << refused.err;
  // The other shard, run with the replaced draft, does not merge with the first.
  CliResult other = run_cli_apart(fmt::format("{} --shard 1/2 --json {}", eval, w.path("s1.json")));
  ASSERT_EQ(other.code, 0) << other.err;
  CliResult merge = run_cli_apart(fmt::format("eval-merge {} {}", w.path("s0.json"), w.path("s1.json")));
  EXPECT_EQ(merge.code, 1) << merge.out;
  EXPECT_NE(merge.err.find(fmt::format("eaglevk: error: {} (there) and {} (here) come from different configurations: {}",
                                       w.path("s1.json"), w.path("s0.json"), replaced)),
            std::string::npos)
      << merge.err;

  // The bit put back, a config field changed instead.
  flip_weight_bit(draft / "model.safetensors", "norm.weight");
  nlohmann::json config = read_json((draft / "config.json").string());
  config["eaglevk_test_note"] = "retrained";
  std::ofstream(draft / "config.json", std::ios::trunc) << config.dump(2);
  CliResult field = run_cli_apart(fmt::format("{} --shard 0/2 --resume {}", eval, resume));
  EXPECT_EQ(field.code, 1) << field.err;
  EXPECT_NE(field.err.find(fmt::format("the draft's fingerprint differs although its path {} is the same (replaced at the "
                                       "same path?): its config.json differs",
                                       draft.string())),
            std::string::npos)
      << field.err;

  // The original files again: the resume file is accepted and nothing is evaluated twice.
  fs::copy_file(asset("tiny-llama3-eagle3/config.json"), draft / "config.json", fs::copy_options::overwrite_existing);
  CliResult resumed = run_cli_apart(fmt::format("{} --shard 0/2 --resume {}", eval, resume));
  EXPECT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("2 of 2 prompts already done"), std::string::npos) << resumed.err;
}

TEST(EvalFingerprint, SameDatasetByRelativeAndAbsolutePaths) {
  const Workspace w;
  const std::string draft = asset("tiny-llama3-eagle3");
  const std::string absolute = w.path("data/data.jsonl"), resume = w.path("r.jsonl");
  const std::string in_data = fmt::format("cd '{}' &&", w.path("data"));
  CliResult relative = run_cli_apart(
      fmt::format("eval -d {} --dataset data.jsonl -k 3 -n 4 --shard 0/2 --resume {} --json {}", draft, resume, w.path("a0.json")),
      in_data);
  ASSERT_EQ(relative.code, 0) << relative.err;
  CliResult abs = run_cli_apart(
      fmt::format("eval -d {} --dataset {} -k 3 -n 4 --shard 1/2 --json {}", draft, absolute, w.path("a1.json")));
  ASSERT_EQ(abs.code, 0) << abs.err;
  EXPECT_EQ(read_json(w.path("a0.json"))["config"]["dataset"], "data.jsonl");
  EXPECT_EQ(read_json(w.path("a1.json"))["config"]["dataset"], absolute);

  CliResult merge = run_cli_apart(fmt::format("eval-merge {} {} -o {}", w.path("a1.json"), w.path("a0.json"), w.path("m.json")));
  ASSERT_EQ(merge.code, 0) << merge.err;
  EXPECT_NE(merge.out.find("merged 2 shards, 4 prompts"), std::string::npos) << merge.out;
  EXPECT_NE(merge.err.find(fmt::format("eaglevk: {} (there) and {} (here): the dataset is data.jsonl there and {} here, "
                                       "with the same fingerprint",
                                       w.path("a0.json"), w.path("a1.json"), absolute)),
            std::string::npos)
      << merge.err;
  const nlohmann::json merged = read_json(w.path("m.json"));
  EXPECT_EQ(merged["config"]["dataset"], absolute) << "the first report's path is recorded";
  EXPECT_EQ(merged["config"]["fingerprints"], read_json(w.path("a0.json"))["config"]["fingerprints"]);

  // Resumed by the absolute path: accepted.
  CliResult resumed =
      run_cli_apart(fmt::format("eval -d {} --dataset {} -k 3 -n 4 --shard 0/2 --resume {}", draft, absolute, resume));
  EXPECT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("2 of 2 prompts already done"), std::string::npos) << resumed.err;
  EXPECT_NE(resumed.err.find(fmt::format("eaglevk: --resume {}: the dataset is data.jsonl there and {} here, with the same "
                                         "fingerprint",
                                         resume, absolute)),
            std::string::npos)
      << resumed.err;

  // The dataset edited in place (one letter of a prompt): refused, naming both paths.
  std::string text;
  {
    std::ifstream in(absolute);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  const size_t at = text.find("modules");
  ASSERT_NE(at, std::string::npos);
  text[at] = 'M';
  std::ofstream(absolute, std::ios::trunc) << text;
  CliResult edited =
      run_cli_apart(fmt::format("eval -d {} --dataset {} -k 3 -n 4 --shard 0/2 --resume {}", draft, absolute, resume));
  EXPECT_EQ(edited.code, 1) << edited.err;
  EXPECT_NE(edited.err.find(fmt::format(
                "the dataset's fingerprint differs (data.jsonl there, {} here): its contents differ (sha256 ", absolute)),
            std::string::npos)
      << edited.err;
}

}  // namespace
}  // namespace eaglevk::testing
