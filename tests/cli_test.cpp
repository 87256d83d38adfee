// The CLI end to end: bad input gives a clear message and a non-zero exit, never a crash;
// --json carries what it promises.
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <cstring>
#include <fstream>
#include <functional>
#include <set>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "loader/safetensors.h"
#include "support/golden.h"
#include "support/process.h"

namespace eaglevk::testing {
namespace {

namespace fs = std::filesystem;

using Result = ProcessResult;

Result run_cli(const std::string& args, bool with_stderr = true) {
  return run_process(
      fmt::format("EAGLEVK_VALIDATE=1 {} {} {}", EAGLEVK_CLI, args, with_stderr ? "2>&1" : "2>/dev/null"));
}

// A writable copy of tiny-llama3 in a fresh temporary folder.
fs::path copy_model(const std::string& tag) {
  fs::path dir = fs::temp_directory_path() / fmt::format("eaglevk-cli-{}-{}", tag, ::getpid());
  fs::remove_all(dir);
  fs::copy(asset("tiny-llama3"), dir);
  for (auto& entry : fs::directory_iterator(dir)) fs::permissions(entry.path(), fs::perms::owner_write, fs::perm_options::add);
  return dir;
}

void expect_clean_failure(const Result& r, const std::string& words) {
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("error:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(words), std::string::npos) << "expected '" << words << "' in: " << r.out;
}

// A command line that cannot run: exit 2, the same prefix as every other error.
void expect_usage_error(const Result& r, const std::string& words) {
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("eaglevk: error:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(words), std::string::npos) << "expected '" << words << "' in: " << r.out;
}

TEST(Cli, NonExistentModelPath) { expect_clean_failure(run_cli("run -m /no/such/model -p hi"), "does not exist"); }

TEST(Cli, TruncatedSafetensors) {
  fs::path dir = copy_model("truncated");
  fs::resize_file(dir / "model.safetensors", 1000);
  expect_clean_failure(run_cli(fmt::format("run -m {} -p hi", dir.string())), "model.safetensors");
  fs::remove_all(dir);
}

TEST(Cli, HeaderLengthPastEnd) {
  fs::path dir = copy_model("header");
  std::fstream f(dir / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
  uint64_t huge = 1ull << 40;
  f.write(reinterpret_cast<const char*>(&huge), 8);
  f.close();
  expect_clean_failure(run_cli(fmt::format("run -m {} -p hi", dir.string())), "header");
  fs::remove_all(dir);
}

// The tensors of dir/model.safetensors, copied out of the mapping (`storage` holds the bytes).
std::vector<loader::TensorData> read_tensors(const fs::path& dir, std::vector<std::vector<std::byte>>& storage) {
  std::vector<loader::TensorData> tensors;
  loader::Checkpoint ckpt = loader::Checkpoint::open(dir / "model.safetensors");
  for (const std::string& name : ckpt.names()) {
    const loader::TensorView& t = ckpt.get(name);
    storage.emplace_back(t.data, t.data + t.bytes);
    tensors.push_back({name, t.dtype, t.shape, {}});
  }
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i].bytes = storage[i];
  return tensors;
}

// Rewrites the checkpoint through `edit`, which may drop or change tensors.
template <typename Edit>
void rewrite_checkpoint(const fs::path& dir, Edit edit) {
  std::vector<std::vector<std::byte>> storage;
  std::vector<loader::TensorData> tensors = read_tensors(dir, storage);
  edit(tensors);
  loader::write_safetensors(dir / "model.safetensors", tensors);
}

TEST(Cli, MissingTensor) {
  fs::path dir = copy_model("missing");
  rewrite_checkpoint(dir, [](auto& t) {
    std::erase_if(t, [](auto& x) { return x.name == "model.layers.3.mlp.up_proj.weight"; });
  });
  expect_clean_failure(run_cli(fmt::format("run -m {} -p hi", dir.string())), "model.layers.3.mlp.up_proj.weight");
  fs::remove_all(dir);
}

// A sharded index that names a missing shard, a shard outside the folder, or two shards that
// both hold a tensor: each is refused with the index named and exit 1.
TEST(Cli, BadShardedIndex) {
  fs::path dir = copy_model("sharded");
  std::vector<std::vector<std::byte>> storage;
  const std::vector<loader::TensorData> tensors = read_tensors(dir, storage);
  nlohmann::json weight_map;
  fs::remove(dir / "model.safetensors");
  const size_t half = tensors.size() / 2;
  std::vector<loader::TensorData> first(tensors.begin(), tensors.begin() + half), second(tensors.begin() + half, tensors.end());
  loader::write_safetensors(dir / "model-00001-of-00002.safetensors", first);
  loader::write_safetensors(dir / "model-00002-of-00002.safetensors", second);
  for (size_t i = 0; i < tensors.size(); ++i)
    weight_map[tensors[i].name] = i < half ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  auto write_index = [&](const nlohmann::json& map) {
    std::ofstream(dir / "model.safetensors.index.json") << nlohmann::json{{"weight_map", map}}.dump();
  };
  const std::string run = fmt::format("run -m {} -p hi -n 1", dir.string());
  write_index(weight_map);
  ASSERT_EQ(run_cli(run).code, 0) << "the well-formed sharded copy must run";

  nlohmann::json missing = weight_map;
  missing[tensors[0].name] = "model-00003-of-00002.safetensors";
  write_index(missing);
  expect_clean_failure(run_cli(run), "shard 'model-00003-of-00002.safetensors' (listed for tensor");

  nlohmann::json outside = weight_map;
  outside[tensors[0].name] = "../model-00001-of-00002.safetensors";
  write_index(outside);
  expect_clean_failure(run_cli(run), "invalid shard path '../model-00001-of-00002.safetensors'");

  // The second shard also holds the first shard's first tensor.
  second.push_back(first.front());
  loader::write_safetensors(dir / "model-00002-of-00002.safetensors", second);
  write_index(weight_map);
  expect_clean_failure(run_cli(run), fmt::format("tensor '{}' also appears in", tensors[0].name));
  fs::remove_all(dir);
}

TEST(Cli, WrongDtypeAndWrongShape) {
  fs::path dir = copy_model("dtype");
  rewrite_checkpoint(dir, [](auto& t) {
    for (auto& x : t)
      if (x.name == "model.layers.0.self_attn.o_proj.weight") {
        x.dtype = loader::DType::I16;  // same byte size, not a weight type
      }
  });
  expect_clean_failure(run_cli(fmt::format("run -m {} -p hi", dir.string())), "o_proj");
  rewrite_checkpoint(dir, [](auto& t) {
    for (auto& x : t)
      if (x.name == "model.layers.0.self_attn.o_proj.weight") {
        x.dtype = loader::DType::BF16;
        x.shape = {128, 512};  // same bytes, wrong shape
      }
  });
  expect_clean_failure(run_cli(fmt::format("run -m {} -p hi", dir.string())), "shape");
  fs::remove_all(dir);
}

TEST(Cli, ConfigMissingField) {
  fs::path dir = copy_model("config");
  std::ifstream in(dir / "config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  in.close();
  config.erase("num_hidden_layers");
  std::ofstream(dir / "config.json") << config.dump();
  expect_clean_failure(run_cli(fmt::format("run -m {} -p hi", dir.string())), "num_hidden_layers");
  fs::remove_all(dir);
}

TEST(Cli, PromptLongerThanContext) {
  expect_clean_failure(run_cli("run --ctx 16 -p \"one two three four five six seven eight nine ten eleven twelve "
                               "thirteen fourteen fifteen sixteen seventeen\""),
                       "context");
}

TEST(Cli, BadPromptIds) {
  expect_usage_error(run_cli("run --prompt-ids 1,2,abc"), "--prompt-ids: 'abc'");
  expect_clean_failure(run_cli("run --prompt-ids 1,2,99999"), "vocabulary");
  // The speculative path checks the ids too: the embedding shader would skip the row and a
  // stale hidden state would reach the draft.
  expect_clean_failure(run_cli(fmt::format("run -d {} --prompt-ids 1,99999 -n 2", asset("tiny-llama3-eagle3"))),
                       "prompt token 99999 (position 1) is outside the vocabulary of 4096");
  expect_clean_failure(
      run_cli(fmt::format("run -d {} --spec-steps 2 --spec-topk 2 --spec-draft-tokens 4 --prompt-ids 5,4096 -n 2",
                          asset("tiny-llama3-eagle3"))),
      "outside the vocabulary");
}

// The command lines a new user tries: each is a usage error (exit 2, `eaglevk: error:`) that
// names what is wrong, found before any model is loaded; none silently does something else.
// --devices splits the layers across logical devices (lavapipe opened twice and three times):
// run's tokens and acceptance, and eval's report, equal one device's, with any --split.
TEST(Cli, LayersSplitAcrossDevicesGiveOneDevicesOutput) {
  const std::string pair = fmt::format("-m {} -d {}", asset("tiny-llama3"), asset("tiny-llama3-eagle3"));
  const auto run_json = [&](const std::string& extra) {
    const Result r = run_cli(fmt::format("run {} -p \"The modules described\" -n 20 --json {}", pair, extra), false);
    EXPECT_EQ(r.code, 0) << extra << ": " << r.out;
    return r.code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json();
  };
  const nlohmann::json one = run_json("");
  for (const std::string split : {"--devices 0,0", "--devices 0,0 --split 1,3", "--devices 0,0,0 --split 2,1,1",
                                  "--devices 0,0 --spec-steps 3 --spec-topk 2 --spec-draft-tokens 5"}) {
    const nlohmann::json tree_one = split.find("spec-steps") != std::string::npos
                                        ? run_json("--spec-steps 3 --spec-topk 2 --spec-draft-tokens 5")
                                        : one;
    const nlohmann::json got = run_json(split);
    EXPECT_EQ(got.value("tokens", nlohmann::json()), tree_one.value("tokens", nlohmann::json())) << split;
    EXPECT_EQ(got["stats"].value("num_accepted_tokens", -1), tree_one["stats"].value("num_accepted_tokens", -2)) << split;
  }
  // Its plan names each device's layers.
  const Result plan = run_cli(fmt::format("run {} -p hi -n 2 --devices 0,0 --split 1,3", pair));
  EXPECT_NE(plan.out.find("device 0 ("), std::string::npos) << plan.out;
  EXPECT_NE(plan.out.find("layers 0..1"), std::string::npos) << plan.out;
  EXPECT_NE(plan.out.find("layers 2..7"), std::string::npos) << plan.out;
  // eval over a split target: the same per-prompt acceptance as one device (batched lines).
  const auto eval_report = [&](const std::string& extra, const std::string& name) {
    const fs::path out = fs::temp_directory_path() / fmt::format("eaglevk-cli-split-{}-{}.json", name, ::getpid());
    const Result r = run_cli(fmt::format("eval {} --dataset {} -n 16 --limit 4 --json {} {}", pair,
                                         (fs::path(EAGLEVK_SOURCE_DIR) / "tests/data/eval_mix.jsonl").string(),
                                         out.string(), extra));
    EXPECT_EQ(r.code, 0) << r.out;
    nlohmann::json j = r.code == 0 ? nlohmann::json::parse(std::ifstream(out)) : nlohmann::json();
    fs::remove(out);
    return j;
  };
  const nlohmann::json eval_one = eval_report("", "one"), eval_split = eval_report("--devices 0,0", "two");
  ASSERT_TRUE(eval_one.contains("per_prompt") && eval_split.contains("per_prompt")) << eval_one.dump().substr(0, 300);
  ASSERT_EQ(eval_one["per_prompt"].size(), 4u);
  ASSERT_EQ(eval_one["per_prompt"].size(), eval_split["per_prompt"].size());
  for (size_t i = 0; i < eval_one["per_prompt"].size(); ++i) {
    EXPECT_EQ(eval_one["per_prompt"][i]["tokens"], eval_split["per_prompt"][i]["tokens"]) << i;
    EXPECT_EQ(eval_one["per_prompt"][i]["num_accepted_tokens"], eval_split["per_prompt"][i]["num_accepted_tokens"]) << i;
  }
}

TEST(Cli, UsageErrorsExitTwoWithThePrefix) {
  const std::string d = asset("tiny-llama3-eagle3");
  expect_usage_error(run_cli("run --temp inf -p hi -n 2"), "temperature must be a finite number >= 0, got inf");
  expect_usage_error(run_cli("run --temp nan -p hi -n 2"), "temperature must be a finite number >= 0, got nan");
  expect_usage_error(run_cli("run --temp 0.5 --top-p nan -p hi -n 2"), "top-p must be in (0, 1]");
  expect_usage_error(run_cli(fmt::format("eval -d {} --dataset /dev/null --temp -1", d)), "temperature");
  // An empty prompt is not replaced by the demo's, with or without -m.
  expect_usage_error(run_cli("run -p \"\" -n 2"), "the prompt (-p) is empty");
  expect_usage_error(run_cli(fmt::format("run -m {} --chat -p \"\" -n 2", asset("tiny-llama3"))), "is empty");
  expect_usage_error(run_cli("run --prompt-ids \"\" -n 2"), "--prompt-ids is empty");
  expect_usage_error(run_cli(fmt::format("run -m {} -n 2", asset("tiny-llama3"))), "run needs a prompt");
  // -k is bounded (-k 1000 once ran for minutes).
  expect_usage_error(run_cli(fmt::format("run -d {} -k 1000 -p hi -n 8", d)), "-k must be in 1..16");
  expect_usage_error(run_cli(fmt::format("run -d {} -k 0 -p hi -n 8", d)), "-k must be in 1..16");
  // A bad --aux-layers value is reported as --aux-layers.
  expect_usage_error(run_cli(fmt::format("run -d {} --aux-layers 2,x,4 -p hi", d)), "--aux-layers: 'x'");
  // CLI11's own parse errors: exit 2 (not 104..114), with the prefix.
  expect_usage_error(run_cli("run --no-such-flag -p hi"), "--no-such-flag");
  expect_usage_error(run_cli("run -n many -p hi"), "many");
  expect_usage_error(run_cli("frobnicate"), "frobnicate");
  // --help is no error.
  EXPECT_EQ(run_cli("run --help").code, 0);
}

// A speculators draft names its verifier: another target runs (losslessly) with a warning.
TEST(CliDraft, DraftForAnotherVerifierWarns) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("eaglevk-cli-verifier-{}", ::getpid());
  fs::remove_all(dir);
  fs::copy(asset("tiny-llama4-eagle3"), dir);
  fs::permissions(dir / "config.json", fs::perms::owner_write, fs::perm_options::add);
  nlohmann::json config = nlohmann::json::parse(std::ifstream(dir / "config.json"));
  Result fits = run_cli(fmt::format("run -m {} -d {} -p hi -n 2", asset("tiny-llama4"), dir.string()));
  EXPECT_EQ(fits.code, 0) << fits.out;
  EXPECT_EQ(fits.out.find("warning"), std::string::npos) << "the draft names tiny-llama4 itself:\n" << fits.out;
  config["speculators_config"]["verifier"]["name_or_path"] = "meta-llama/Llama-4-Maverick-17B-128E-Instruct";
  std::ofstream(dir / "config.json") << config.dump();
  Result other = run_cli(fmt::format("run -m {} -d {} -p hi -n 2", asset("tiny-llama4"), dir.string()));
  EXPECT_EQ(other.code, 0) << other.out;
  EXPECT_NE(other.out.find("eaglevk: warning: the draft was trained for the verifier "
                           "'meta-llama/Llama-4-Maverick-17B-128E-Instruct'"),
            std::string::npos)
      << other.out;
  fs::remove_all(dir);
}

// ---- tests/data/bad_inputs.json: broken and malicious files and arguments ---------------

// A JSON array nested `depth` deep, as text (building it as a json value and dumping it would
// itself need `depth` stack frames).
std::string deep_json(size_t depth = 100000) { return std::string(depth, '[') + std::string(depth, ']'); }

// Sets `pointer` in the JSON file to `value`; "@deep" and "@truncated_utf8_template" are
// spliced in as raw text (the first too deep to build, the second not valid UTF-8).
void json_set(const fs::path& file, const std::string& pointer, const nlohmann::json& value) {
  nlohmann::json j = nlohmann::json::parse(std::ifstream(file));
  const bool raw = value.is_string() && value.get<std::string>().starts_with("@");
  j[nlohmann::json::json_pointer(pointer)] = raw ? nlohmann::json("@@RAW@@") : value;
  std::string text = j.dump();
  if (raw) {
    const std::string what = value.get<std::string>();
    const std::string splice = what == "@deep" ? deep_json() : "\"{{ bos_token }}caf\xc3\"";
    text.replace(text.find("\"@@RAW@@\""), 9, splice);
  }
  std::ofstream(file, std::ios::binary | std::ios::trunc) << text;
}

// Sets every element of tensor `name` in a safetensors file to `value` ("nan" or "inf"), in
// place: the header is read here, apart from the loader.
void tensor_fill(const fs::path& file, const std::string& name, const std::string& value) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  uint64_t header_length = 0;
  f.read(reinterpret_cast<char*>(&header_length), 8);
  std::string header(header_length, '\0');
  f.read(header.data(), std::streamsize(header_length));
  const nlohmann::json entry = nlohmann::json::parse(header).at(name);
  const std::string dtype = entry.at("dtype");
  const uint64_t begin = entry.at("data_offsets")[0], end = entry.at("data_offsets")[1];
  const bool nan = value == "nan";
  // The bits of a quiet NaN or +inf in each float type.
  const uint32_t f32 = nan ? 0x7fc00000u : 0x7f800000u;
  const uint16_t half = dtype == "BF16" ? uint16_t(f32 >> 16) : nan ? 0x7e00 : 0x7c00;
  const size_t size = dtype == "F32" ? 4 : 2;
  ASSERT_TRUE(dtype == "F32" || dtype == "BF16" || dtype == "F16") << dtype;
  f.seekp(std::streamoff(8 + header_length + begin));
  for (uint64_t at = begin; at < end; at += size)
    f.write(size == 4 ? reinterpret_cast<const char*>(&f32) : reinterpret_cast<const char*>(&half),
            std::streamsize(size));
}

// Every entry gives exit status 1 (or its "status": 2 for a usage error) and one short
// `eaglevk: error:` message naming what is wrong ("words"; "absent": text it must not quote):
// never a signal, a hang or a run that goes on with a wrong value. "mkfifo" makes a FIFO.
TEST(Cli, EveryBadInputIsACleanError) {
  const nlohmann::json table =
      nlohmann::json::parse(std::ifstream(std::string(EAGLEVK_SOURCE_DIR) + "/tests/data/bad_inputs.json"));
  ASSERT_GE(table.size(), 20u);
  // EAGLEVK_CLI_UNDER_TEST runs the table against another build of the CLI: tests/run_sanitized.sh
  // gives the sanitized one, without building the test support library under the sanitizers.
  const char* other = std::getenv("EAGLEVK_CLI_UNDER_TEST");
  const std::string cli = other && *other ? other : EAGLEVK_CLI;
  if (other && *other) fmt::print("the bad-input table runs {}\n", cli);
  for (const nlohmann::json& entry : table) {
    const std::string name = entry.at("name");
    SCOPED_TRACE(name);
    const fs::path dir = fs::temp_directory_path() / fmt::format("eaglevk-bad-{}", ::getpid());
    fs::remove_all(dir);
    fs::create_directories(dir);
    for (const std::string model : entry.value("copy", nlohmann::json::array())) {
      fs::copy(asset(model), dir / model);
      for (auto& f : fs::directory_iterator(dir / model)) fs::permissions(f.path(), fs::perms::owner_write, fs::perm_options::add);
    }
    if (entry.contains("copy_file")) {
      fs::copy_file(asset(entry["copy_file"][0]), dir / entry["copy_file"][1].get<std::string>());
      fs::permissions(dir / entry["copy_file"][1].get<std::string>(), fs::perms::owner_write, fs::perm_options::add);
    }
    if (entry.contains("json_set"))
      json_set(dir / entry["json_set"][0].get<std::string>(), entry["json_set"][1], entry["json_set"][2]);
    if (entry.contains("write"))
      std::ofstream(dir / entry["write"][0].get<std::string>(), std::ios::binary) << entry["write"][1].get<std::string>();
    if (entry.contains("truncate")) fs::resize_file(dir / entry["truncate"][0].get<std::string>(), entry["truncate"][1]);
    if (entry.contains("header_length")) {
      std::fstream f(dir / entry["header_length"][0].get<std::string>(), std::ios::in | std::ios::out | std::ios::binary);
      const uint64_t length = std::stoull(entry["header_length"][1].get<std::string>());
      f.write(reinterpret_cast<const char*>(&length), 8);
    }
    if (entry.contains("deep_header")) {
      const std::string header = "{\"model.embed_tokens.weight\": {\"dtype\": \"F32\", \"shape\": " + deep_json() +
                                 ", \"data_offsets\": [0, 4]}}";
      const uint64_t length = header.size();
      std::ofstream f(dir / entry["deep_header"].get<std::string>(), std::ios::binary | std::ios::trunc);
      f.write(reinterpret_cast<const char*>(&length), 8);
      f << header << "abcd";
    }
    if (entry.contains("tensor_fill"))
      tensor_fill(dir / entry["tensor_fill"][0].get<std::string>(), entry["tensor_fill"][1], entry["tensor_fill"][2]);
    if (entry.contains("deep_file")) std::ofstream(dir / entry["deep_file"].get<std::string>()) << deep_json() << "\n";
    if (entry.contains("mkfifo")) ASSERT_EQ(::mkfifo((dir / entry["mkfifo"].get<std::string>()).c_str(), 0600), 0);

    std::string args = entry.at("args");
    for (auto [key, value] : {std::pair{std::string("{dir}"), dir.string()}, std::pair{std::string("{assets}"), asset("")}})
      for (size_t at; (at = args.find(key)) != std::string::npos;) args.replace(at, key.size(), value);
    // A hang fails too: the run gets two minutes.
    const std::string env = entry.value("env", "");  // variables for the run, e.g. "EAGLEVK_PROFILE_OVERRIDE=subgroup.size=3"
    const Result r = run_process(fmt::format("EAGLEVK_VALIDATE=1 {} timeout 120 {} {} 2>&1", env, cli, args));
    EXPECT_EQ(r.code, entry.value("status", 1)) << args << "\n" << r.out.substr(0, 3000);
    const size_t at = r.out.find("eaglevk: error: ");
    ASSERT_NE(at, std::string::npos) << args << "\n" << r.out.substr(0, 3000);
    const std::string message = r.out.substr(at, r.out.find('\n', at) - at);
    EXPECT_NE(message.find(entry.at("words").get<std::string>()), std::string::npos) << message;
    EXPECT_LT(message.size(), 1000u) << "an error message should be short: " << message.substr(0, 1000);
    if (entry.contains("absent")) {
      EXPECT_EQ(r.out.find(entry["absent"].get<std::string>()), std::string::npos) << r.out;
    }
    fs::remove_all(dir);
  }
}

TEST(Cli, JsonMatchesGoldenForAPrompt) {
  Golden g = load_golden(asset("tiny-llama3"));
  const GoldenPrompt& p = g.prompts[0];
  std::string ids;
  for (int32_t id : p.prompt_ids) ids += (ids.empty() ? "" : ",") + std::to_string(id);
  Result r = run_cli(fmt::format("run --prompt-ids {} -n 16 --ignore-eos --json --top-logits 5", ids), false);
  ASSERT_EQ(r.code, 0) << r.out;
  nlohmann::json j = nlohmann::json::parse(r.out.substr(0, r.out.find('\n')));
  EXPECT_EQ(j["prompt_tokens"].get<std::vector<int32_t>>(), p.prompt_ids);
  std::vector<int32_t> want(p.greedy_ids.begin(), p.greedy_ids.begin() + 16);
  EXPECT_EQ(j["tokens"].get<std::vector<int32_t>>(), want);
  ASSERT_EQ(j["prompt_top_logits"].size(), 5u);
  EXPECT_EQ(j["prompt_top_logits"][0][0].get<int32_t>(), p.top5_ids[0]);
  EXPECT_NEAR(j["prompt_top_logits"][0][1].get<float>(), p.top5_logits[0], 2e-3);
  EXPECT_TRUE(j["timing"].contains("decode_tokens_per_s"));
}

TEST(Cli, ChatPromptMatchesGoldenIds) {
  // The golden chat prompt 9 is one user turn; --chat must render and encode it identically.
  Golden g = load_golden(asset("tiny-llama3"));
  std::ifstream in(asset("tiny-llama3/prompts.jsonl"));
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json p = nlohmann::json::parse(line);
    if (p["type"] != "chat" || p["messages"].size() != 1) continue;
    std::string text = p["messages"][0]["content"];
    fs::path file = fs::temp_directory_path() / fmt::format("eaglevk-chat-{}.txt", ::getpid());
    std::ofstream(file) << text;
    Result r = run_cli(fmt::format("run --chat -f {} -n 4 --json", file.string()), false);
    fs::remove(file);
    ASSERT_EQ(r.code, 0) << r.out;
    nlohmann::json j = nlohmann::json::parse(r.out.substr(0, r.out.find('\n')));
    EXPECT_EQ(j["prompt_tokens"].get<std::vector<int32_t>>(), g.prompts[p["id"].get<int>()].prompt_ids);
    // The rendered text as transformers wrote it when the golden file was made.
    EXPECT_EQ(j["prompt_text"].get<std::string>(), g.raw["prompts"][p["id"].get<int>()]["prompt_text"].get<std::string>());
    return;
  }
  FAIL() << "no single-turn chat prompt in prompts.jsonl";
}

// --chat-template replaces the checkpoint's template: a fine-tune's edited role header reaches
// the prompt (the recogniser it replaced rendered the stock header whatever the template said).
TEST(Cli, ChatTemplateFileReplacesTheModels) {
  const nlohmann::json config = nlohmann::json::parse(std::ifstream(asset("tiny-llama3/tokenizer_config.json")));
  std::string jinja = config["chat_template"].get<std::string>();
  const std::string stock = "'<|start_header_id|>' + message['role']";
  ASSERT_NE(jinja.find(stock), std::string::npos);
  jinja.replace(jinja.find(stock), stock.size(), "'<|start_header_id|>' + message['role'] | upper");
  const fs::path file = fs::temp_directory_path() / fmt::format("eaglevk-template-{}.jinja", ::getpid());
  std::ofstream(file) << jinja;
  Result r = run_cli(fmt::format("run --chat -p hi --chat-template {} -n 2 --json", file.string()), false);
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out.substr(0, r.out.find('\n')));
  const std::string text = j["prompt_text"].get<std::string>();
  EXPECT_NE(text.find("<|start_header_id|>USER<|end_header_id|>"), std::string::npos) << text;
  EXPECT_EQ(text.find("<|start_header_id|>user"), std::string::npos) << text;

  // A template the engine does not render fails the load, naming the file and the construct.
  std::ofstream(file) << "{% include 'other.jinja' %}";
  const Result bad = run_cli(fmt::format("run --chat -p hi --chat-template {} -n 2", file.string()));
  expect_clean_failure(bad, "`include` statement");
  EXPECT_NE(bad.out.find(file.string()), std::string::npos) << bad.out;
  fs::remove(file);
}

TEST(Cli, DevicesListsLavapipeFeatures) {
  Result r = run_cli("devices");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("subgroup size"), std::string::npos);
  EXPECT_NE(r.out.find("maxStorageBufferRange"), std::string::npos);
}

}  // namespace
}  // namespace eaglevk::testing

namespace eaglevk::testing {
namespace {

fs::path copy_draft(const std::string& tag) {
  fs::path dir = fs::temp_directory_path() / fmt::format("eaglevk-draft-{}-{}", tag, ::getpid());
  fs::remove_all(dir);
  fs::copy(asset("tiny-llama3-eagle3"), dir);
  for (auto& entry : fs::directory_iterator(dir)) fs::permissions(entry.path(), fs::perms::owner_write, fs::perm_options::add);
  return dir;
}

void edit_config(const fs::path& dir, const std::function<void(nlohmann::json&)>& edit) {
  std::ifstream in(dir / "config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  in.close();
  edit(config);
  std::ofstream(dir / "config.json") << config.dump();
}

TEST(CliDraft, SpeculativeRunPrintsTheAcceptanceBlockAndJsonStats) {
  std::string d = asset("tiny-llama3-eagle3");
  Result r = run_cli(fmt::format("run -d {} -k 3 -n 24 --ignore-eos -p \"The modules\"", d));
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* line : {"total_num_output_tokens: 24", "num_drafts:", "num_draft_tokens:", "num_accepted_tokens:",
                           "mean acceptance length:", "acceptance at token 0:", "acceptance at token 2:"})
    EXPECT_NE(r.out.find(line), std::string::npos) << line << " missing in:\n" << r.out;
  EXPECT_EQ(r.out.find("validation error"), std::string::npos) << r.out;
  Result j = run_cli(fmt::format("run -d {} -k 2 -n 12 --ignore-eos -p \"The modules\" --json", d), false);
  ASSERT_EQ(j.code, 0);
  nlohmann::json out = nlohmann::json::parse(j.out.substr(0, j.out.find('\n')));
  ASSERT_TRUE(out.contains("stats"));
  EXPECT_EQ(out["stats"]["acceptance_per_position"].size(), 2u);
  EXPECT_EQ(out["tokens"].size(), 12u);
  // Lossless: the same tokens as plain decoding.
  Result plain = run_cli("run -n 12 --ignore-eos -p \"The modules\" --json", false);
  EXPECT_EQ(nlohmann::json::parse(plain.out.substr(0, plain.out.find('\n')))["tokens"], out["tokens"]);
}

// Tree flags on `run`: greedy and at T > 0 the output is plain decoding's with the same seed;
// --draft-sampling (a chain scheme) and -k beside tree flags are refused.
TEST(CliDraft, TreeFlagsRunLosslessGreedyAndSampled) {
  std::string d = asset("tiny-llama3-eagle3");
  auto tokens = [](const Result& r) {
    EXPECT_EQ(r.code, 0) << r.out;
    return nlohmann::json::parse(r.out.substr(0, r.out.find('\n')))["tokens"];
  };
  const std::string tree = " --spec-steps 4 --spec-topk 2 --spec-draft-tokens 6";
  for (const char* sampling : {"", " --temp 0.8 --top-p 0.95 --seed 21"}) {
    const std::string common = fmt::format(" -n 16 --ignore-eos -p \"The modules\" --json{}", sampling);
    Result spec = run_cli(fmt::format("run -d {}{}{}", d, tree, common), false);
    EXPECT_EQ(tokens(spec), tokens(run_cli("run" + common, false))) << sampling;
    EXPECT_TRUE(nlohmann::json::parse(spec.out.substr(0, spec.out.find('\n'))).contains("stats")) << spec.out;
  }
  expect_usage_error(run_cli(fmt::format("run -d {}{} --temp 1 --draft-sampling -p hi", d, tree)), "--draft-sampling");
  expect_usage_error(run_cli(fmt::format("run -d {}{} -k 3 -p hi", d, tree)), "-k");
}

// --spec-draft-tokens auto: measures the pass costs once (cached in EAGLEVK_CACHE_DIR),
// calibrates within the --spec-steps / --spec-topk bounds, says what it chose, stays lossless.
TEST(CliDraft, AutoTreeChoosesCachesAndStaysLossless) {
  const fs::path cache = fs::temp_directory_path() / fmt::format("eaglevk-auto-cache-{}", ::getpid());
  fs::remove_all(cache);
  const std::string args = fmt::format("run -d {} --spec-steps 3 --spec-topk 2 --spec-draft-tokens auto -n 12 --ignore-eos "
                                       "-p \"The modules\" --json",
                                       asset("tiny-llama3-eagle3"));
  ::setenv("EAGLEVK_CACHE_DIR", cache.c_str(), 1);  // the child processes inherit it
  const std::string env;
  Result first = run_cli(env + args);
  ASSERT_EQ(first.code, 0) << first.out;
  EXPECT_NE(first.out.find("pass costs measured"), std::string::npos) << first.out;
  EXPECT_NE(first.out.find("calibrated top-k  2"), std::string::npos) << first.out;
  EXPECT_EQ(first.out.find("calibrated top-k  4"), std::string::npos) << "--spec-topk 2 bounds the search:\n" << first.out;
  EXPECT_NE(first.out.find("chose steps"), std::string::npos) << first.out;
  size_t files = 0;
  for (const auto& entry : fs::directory_iterator(cache)) files += entry.path().extension() == ".json";
  EXPECT_EQ(files, 1u);
  Result second = run_cli(env + args, false);
  ASSERT_EQ(second.code, 0);
  Result second_log = run_cli(env + args);
  EXPECT_NE(second_log.out.find("pass costs from the cache"), std::string::npos) << second_log.out;
  Result plain = run_cli("run -n 12 --ignore-eos -p \"The modules\" --json", false);
  EXPECT_EQ(nlohmann::json::parse(second.out.substr(0, second.out.find('\n')))["tokens"],
            nlohmann::json::parse(plain.out.substr(0, plain.out.find('\n')))["tokens"]);
  expect_usage_error(run_cli(env + fmt::format("run -d {} --spec-topk 17 --spec-draft-tokens auto -p hi",
                                                 asset("tiny-llama3-eagle3"))),
                       "--spec-topk: 17 is too large (the range is 1..16)");
  ::unsetenv("EAGLEVK_CACHE_DIR");
  fs::remove_all(cache);
}

TEST(CliDraft, AuxLayersOverrideIsLoggedAndStillLossless) {
  const std::string common = " -n 24 --ignore-eos -p \"The modules\" --json";
  Result r = run_cli(fmt::format("run -d {} --aux-layers 1,3,6{}", asset("tiny-llama3-eagle3"), common));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("layers 1,3,6"), std::string::npos) << r.out;
  // Other taps change what the draft proposes, never what is emitted.
  auto json_of = [](const Result& x) { return nlohmann::json::parse(x.out.substr(x.out.find('{'), x.out.find('\n', x.out.find('{')) - x.out.find('{'))); };
  Result plain = run_cli("run" + common, false);
  ASSERT_EQ(plain.code, 0) << plain.out;
  EXPECT_EQ(json_of(r)["tokens"], json_of(plain)["tokens"]);
  EXPECT_EQ(json_of(r)["tokens"].size(), 24u);
  EXPECT_GT(json_of(r)["stats"]["num_drafts"].get<int>(), 0);
}

TEST(CliDraft, DumpTapsWritesSafetensors) {
  fs::path file = fs::temp_directory_path() / fmt::format("eaglevk-taps-{}.safetensors", ::getpid());
  Result r = run_cli(fmt::format("run -d {} -n 10 --ignore-eos --prompt-ids 4091,692,1360 --dump-taps {}",
                                 asset("tiny-llama3-eagle3"), file.string()));
  ASSERT_EQ(r.code, 0) << r.out;
  loader::Checkpoint taps = loader::Checkpoint::open(file);
  const auto& hidden = taps.get("hidden_states");
  const auto& ids = taps.get("token_ids");
  const auto& pos = taps.get("positions");
  // Every verified position once: the 3 prompt positions, then generated ones in order.
  ASSERT_EQ(hidden.shape[1], 3 * 256);
  ASSERT_EQ(ids.shape[0], hidden.shape[0]);
  auto p = loader::to_i32(pos);
  for (size_t i = 0; i < p.size(); ++i) EXPECT_EQ(p[i], int32_t(i));
  auto t = loader::to_i32(ids);
  EXPECT_EQ(t[0], 4091);
  EXPECT_EQ(t[2], 1360);
  EXPECT_GE(p.size(), 10u);
  EXPECT_EQ(taps.metadata.at("aux_layers"), "2,4,5");
  fs::remove(file);
}

TEST(CliDraft, BadDrafts) {
  std::string base = "run -n 4 -p hi -d ";
  {
    fs::path d = copy_draft("hidden");
    edit_config(d, [](auto& c) { c["target_hidden_size"] = 128; });
    expect_clean_failure(run_cli(base + d.string()), "hidden size");
    fs::remove_all(d);
  }
  expect_clean_failure(run_cli(base + asset("tiny-llama3-eagle3") + " --aux-layers 2,4,9"), "out of range");
  {
    fs::path d = copy_draft("format");
    edit_config(d, [](auto& c) { c["architectures"] = {"MedusaModel"}; });
    expect_clean_failure(run_cli(base + d.string()), "not an EAGLE-3 draft");
    fs::remove_all(d);
  }
  {
    fs::path d = copy_draft("d2t");
    std::vector<std::vector<std::byte>> storage;
    std::vector<loader::TensorData> tensors;
    {
      loader::Checkpoint ckpt = loader::Checkpoint::open(d / "model.safetensors");
      for (const std::string& name : ckpt.names()) {
        const loader::TensorView& t = ckpt.get(name);
        storage.emplace_back(t.data, t.data + t.bytes);
        tensors.push_back({name, t.dtype, t.shape, {}});
      }
    }
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (tensors[i].name == "d2t") {
        int64_t big = 100000;
        std::memcpy(storage[i].data() + 8 * 5, &big, 8);  // d2t[5] far outside the vocabulary
      }
      tensors[i].bytes = storage[i];
    }
    loader::write_safetensors(d / "model.safetensors", tensors);
    expect_clean_failure(run_cli(base + d.string()), "d2t[5]");
    fs::remove_all(d);
  }
  expect_clean_failure(run_cli(base + "/no/such/draft"), "'/no/such/draft' does not exist");
}

// --dump-taps into a FIFO: written in place (a rename over it would replace the FIFO with a
// regular file); the reader at its other end gets the whole safetensors file.
TEST(CliDraft, DumpTapsIntoAFifoKeepsTheFifo) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("eaglevk-cli-fifo-{}", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path fifo = dir / "taps", copy = dir / "copy.safetensors";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const Result r = run_process(fmt::format(
      "(timeout 120 cat {0} > {1}) & EAGLEVK_VALIDATE=1 timeout 120 {2} run -d {3} -n 10 --ignore-eos "
      "--prompt-ids 4091,692,1360 --dump-taps {0} 2>&1; status=$?; wait; exit $status",
      fifo.string(), copy.string(), EAGLEVK_CLI, asset("tiny-llama3-eagle3")));
  ASSERT_EQ(r.code, 0) << r.out;
  struct stat st {};
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "--dump-taps replaced the FIFO";
  loader::Checkpoint taps = loader::Checkpoint::open(copy);
  EXPECT_EQ(taps.get("hidden_states").shape[1], 3 * 256);
  auto p = loader::to_i32(taps.get("positions"));
  ASSERT_GE(p.size(), 10u);
  for (size_t i = 0; i < p.size(); ++i) EXPECT_EQ(p[i], int32_t(i));
  EXPECT_EQ(std::set<std::string>({"copy.safetensors", "taps"}),
            [&] {
              std::set<std::string> names;
              for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
              return names;
            }());
  fs::remove_all(dir);
}

// --seed -1 is a random seed, as llama.cpp users expect: drawn, printed, recorded in --json,
// and the printed seed repeats the run. (It once wrapped to 2^64 - 1.)
TEST(Cli, SeedMinusOneDrawsARandomSeed) {
  const std::string args = "run -p \"The modules\" -n 12 --ignore-eos --temp 1 --json";
  const Result r = run_cli(args + " --seed -1");
  ASSERT_EQ(r.code, 0) << r.out;
  const size_t at = r.out.find("eaglevk: seed ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const uint64_t printed = std::stoull(r.out.substr(at + 14));
  const nlohmann::json j = nlohmann::json::parse(r.out.substr(r.out.find("{\"")).substr(0, r.out.find('\n', r.out.find("{\"")) - r.out.find("{\"")));
  EXPECT_EQ(j["seed"].get<uint64_t>(), printed);
  EXPECT_NE(printed, UINT64_MAX);
  const Result again = run_cli(fmt::format("{} --seed {}", args, printed), false);
  ASSERT_EQ(again.code, 0) << again.out;
  EXPECT_EQ(nlohmann::json::parse(again.out.substr(0, again.out.find('\n')))["tokens"], j["tokens"]);
}

// A context above the model's maximum is clipped with a warning; a prompt longer than the
// maximum is told the real limit, not to raise --ctx.
TEST(Cli, ContextAboveTheModelsMaximumWarns) {
  const int most = nlohmann::json::parse(std::ifstream(asset("tiny-llama3/config.json")))["max_position_embeddings"];
  const Result clipped = run_cli("run --ctx 100000 -p hi -n 1");
  EXPECT_EQ(clipped.code, 0) << clipped.out;
  EXPECT_NE(clipped.out.find(fmt::format("eaglevk: warning: a context of 100000 tokens was asked for, but the model "
                                         "allows {0}: using {0}", most)),
            std::string::npos)
      << clipped.out;
  EXPECT_EQ(run_cli("run -p hi -n 1").out.find("warning"), std::string::npos);
  const fs::path file = fs::temp_directory_path() / fmt::format("eaglevk-long-{}.txt", ::getpid());
  {
    std::ofstream out(file);
    for (int i = 0; i < most + 100; ++i) out << " hello";
  }
  const Result long_prompt = run_cli(fmt::format("run --ctx 100000 -f {} -n 1", file.string()));
  EXPECT_EQ(long_prompt.code, 1) << long_prompt.out;
  EXPECT_NE(long_prompt.out.find(fmt::format("but the context holds {}, the most the model allows", most)),
            std::string::npos)
      << long_prompt.out;
  EXPECT_EQ(long_prompt.out.find("raise"), std::string::npos) << long_prompt.out;
  const Result short_context = run_cli(fmt::format("run --ctx 1024 -f {} -n 1", file.string()));
  EXPECT_NE(short_context.out.find(fmt::format("but the context holds 1024 (--ctx: the model allows up to {})", most)),
            std::string::npos)
      << short_context.out;
  fs::remove(file);
}

// A prompt with more bytes than the context can hold in tokens is refused before it is
// encoded (a 50 MB line once cost a gigabyte first), naming the dataset line.
TEST(Cli, PromptTooLongForTheContextIsRefusedBeforeEncoding) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("eaglevk-cli-huge-{}", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string huge(300000, 'a');
  std::ofstream(dir / "d.jsonl") << "{\"prompt\": \"hi\"}\n" << nlohmann::json{{"prompt", huge}}.dump() << "\n";
  std::ofstream(dir / "p.txt") << huge;
  const Result eval = run_cli(fmt::format("eval -d {} --dataset {} --ctx 64 -n 1", asset("tiny-llama3-eagle3"),
                                          (dir / "d.jsonl").string()));
  EXPECT_EQ(eval.code, 1) << eval.out;
  EXPECT_NE(eval.out.find("d.jsonl:2: 300000 bytes cannot fit in a context of 64 tokens"), std::string::npos) << eval.out;
  EXPECT_NE(eval.out.find("too long to encode"), std::string::npos) << eval.out;
  const Result run = run_cli(fmt::format("run --ctx 64 -f {} -n 1", (dir / "p.txt").string()));
  EXPECT_EQ(run.code, 1) << run.out;
  EXPECT_NE(run.out.find("the prompt: 300000 bytes cannot fit in a context of 64 tokens"), std::string::npos) << run.out;
  fs::remove_all(dir);
}

// A role none of the templates' usual ones is rendered as given, with one warning line; the
// usual roles give none.
TEST(Cli, UnusualRoleInMessagesWarns) {
  const fs::path file = fs::temp_directory_path() / fmt::format("eaglevk-roles-{}.json", ::getpid());
  std::ofstream(file) << R"([{"role": "narrator", "content": "Once"}, {"role": "user", "content": "hi"},
                             {"role": "narrator", "content": "again"}])";
  const Result r = run_cli(fmt::format("run --messages {} -n 2 --json", file.string()));
  EXPECT_EQ(r.code, 0) << r.out;
  const std::string warning = fmt::format("eaglevk: warning: {}: messages[0] has the role 'narrator'", file.string());
  ASSERT_NE(r.out.find(warning), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(warning, r.out.find(warning) + 1), std::string::npos) << "warned twice:\n" << r.out;
  EXPECT_NE(r.out.find("<|start_header_id|>narrator<|end_header_id|>"), std::string::npos) << r.out;
  std::ofstream(file) << R"([{"role": "system", "content": "Be brief"}, {"role": "user", "content": "hi"}])";
  const Result usual = run_cli(fmt::format("run --messages {} -n 2", file.string()));
  EXPECT_EQ(usual.code, 0) << usual.out;
  EXPECT_EQ(usual.out.find("warning"), std::string::npos) << usual.out;
  fs::remove(file);
}

}  // namespace
}  // namespace eaglevk::testing
