// Image prompts through the CLI as a user gives them: `run --image FILE --chat -p TEXT` and
// `run --messages FILE.json` (Hugging Face chat format, image paths relative to the file) give
// the golden prompt ids and greedy tokens of golden_vision.json, plain and with the draft; bad
// images and models without a usable vision tower fail cleanly.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "support/golden.h"
#include "support/process.h"
#include "support/vision_gguf.h"

namespace eaglevk::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

ProcessResult run_cli(const std::string& args) {
  return run_process(fmt::format("EAGLEVK_VALIDATE=1 {} {} 2>&1", EAGLEVK_CLI, args));
}

// The JSON object `run --json` prints last on stdout (stderr lines come before it).
json last_json(const ProcessResult& r) {
  const size_t at = r.out.rfind("\n{");
  return json::parse(r.out.substr(at == std::string::npos ? 0 : at + 1, r.out.find('\n', at + 1) - at));
}

void expect_clean_failure(const ProcessResult& r, const std::string& words) {
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("error:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(words), std::string::npos) << "expected '" << words << "' in: " << r.out;
}

const json& golden() {
  static json g = json::parse(std::ifstream(asset("tiny-llama4-vision/golden_vision.json")));
  return g;
}

fs::path temp_dir(const std::string& tag) {
  fs::path dir = fs::temp_directory_path() / fmt::format("eaglevk-cli-vision-{}-{}", tag, ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

const std::string kModel = asset("tiny-llama4-vision"), kDraft = asset("tiny-llama4-vision-eagle3");

TEST(CliVision, ImageFlagWithChatGivesTheGoldenPromptAndTokens) {
  const json& p = golden()["prompts"][0];  // one 1-tile image, then "Describe this image."
  const std::string image = kModel + "/images/" + p["images"][0].get<std::string>();
  const std::string text = p["messages"][0]["content"][1]["text"];
  for (const std::string& draft : std::vector<std::string>{"", " -d " + kDraft + " -k 3"}) {
    ProcessResult r = run_cli(fmt::format("run -m {} --image {} --chat -p \"{}\" -n 32 --ignore-eos --json{}", kModel,
                                          image, text, draft));
    ASSERT_EQ(r.code, 0) << r.out;
    json j = last_json(r);
    EXPECT_EQ(j["prompt_tokens"], p["prompt_ids"]) << draft;
    EXPECT_EQ(j["tokens"], p["greedy_ids"]) << draft;
  }
}

TEST(CliVision, MessagesFileWithTwoImagesGivesTheGoldenPromptAndTokens) {
  const json& p = golden()["prompts"][6];  // two images in one message, text between them
  fs::path dir = temp_dir("messages");
  // Images beside the messages file, named relative to it as the golden file names them.
  fs::create_directories(dir / "pics");
  json messages = p["messages"];
  for (json& part : messages[0]["content"])
    if (part["type"] == "image") {
      fs::copy_file(kModel + "/images/" + part["image"].get<std::string>(), dir / "pics" / part["image"].get<std::string>());
      part["image"] = "pics/" + part["image"].get<std::string>();
    }
  std::ofstream(dir / "chat.json") << messages.dump(1);
  ProcessResult r = run_cli(fmt::format("run -m {} --messages {} -n 32 --ignore-eos --json -d {} -k 1", kModel,
                                        (dir / "chat.json").string(), kDraft));
  ASSERT_EQ(r.code, 0) << r.out;
  json j = last_json(r);
  EXPECT_EQ(j["prompt_tokens"], p["prompt_ids"]);
  EXPECT_EQ(j["tokens"], p["greedy_ids"]);
  EXPECT_EQ(j["stats"]["num_drafts"], p["spec"]["1"]["num_drafts"]);
  EXPECT_EQ(j["stats"]["num_accepted_tokens"], p["spec"]["1"]["num_accepted_tokens"]);
  fs::remove_all(dir);
}

// eval over a JSONL dataset of the golden image conversations (content parts, image paths
// relative to the dataset): per-prompt generated ids and the totals equal the golden's, with the
// checkpoint and with its GGUF text model plus llama.cpp's vision file (--mmproj).
TEST(CliVision, EvalTakesImageMessagesAndRecordsTheGeneratedIds) {
  fs::path dir = temp_dir("eval");
  fs::create_directories(dir / "pics");
  std::ofstream lines(dir / "images.jsonl");
  for (const json& p : golden()["prompts"]) {
    json messages = p["messages"];
    for (json& m : messages)
      if (m["content"].is_array())
        for (json& part : m["content"])
          if (part["type"] == "image") {
            const std::string name = part["image"];
            if (!fs::exists(dir / "pics" / name)) fs::copy_file(kModel + "/images/" + name, dir / "pics" / name);
            part["image"] = "pics/" + name;
          }
    lines << json{{"messages", messages}}.dump() << "\n";
  }
  lines.close();
  const fs::path out = dir / "out.json";
  // The checkpoint, and its GGUF text model with llama.cpp's f16 vision file.
  const std::string gguf = write_tiny_llama4_vision_gguf(dir / "gguf").string();
  const std::string mmproj = asset("gguf/tiny-llama4-vision/mmproj-tiny-llama4-vision-f16.gguf");
  for (const std::string& model : {kModel, gguf + " --mmproj " + mmproj}) {
    ProcessResult r = run_cli(fmt::format("eval -m {} -d {} --dataset {} -k 3 -n 32 --json {}", model, kDraft,
                                          (dir / "images.jsonl").string(), out.string()));
    ASSERT_EQ(r.code, 0) << r.out;
    json j = json::parse(std::ifstream(out));
    ASSERT_EQ(j["per_prompt"].size(), golden()["prompts"].size());
    for (size_t i = 0; i < j["per_prompt"].size(); ++i)
      EXPECT_EQ(j["per_prompt"][i]["tokens"], golden()["prompts"][i]["greedy_ids"]) << model << " prompt " << i;
    const json& want = golden()["acceptance"]["image"]["3"];
    EXPECT_EQ(j["totals"]["num_drafts"], want["num_drafts"]) << model;
    EXPECT_EQ(j["totals"]["num_accepted_tokens"], want["num_accepted_tokens"]) << model;
  }
  // A line whose image is missing is skipped with its line number, or stops a --strict run.
  std::ofstream(dir / "bad.jsonl") << R"({"messages": [{"role": "user", "content": [{"type": "image", "image": "pics/none.png"}, {"type": "text", "text": "hi"}]}]})"
                                   << "\n";
  expect_clean_failure(run_cli(fmt::format("eval -m {} -d {} --dataset {} -n 2", kModel, kDraft, (dir / "bad.jsonl").string())),
                       "none.png");
  fs::remove_all(dir);
}

// A GGUF Llama-4 with llama.cpp's vision file, as llama.cpp's users run it (`--mmproj`): the
// golden prompt's ids, its last-position top-5 logits and greedy tokens, plain and with the
// draft; `inspect --mmproj` finds the tower usable, `inspect` of the file alone describes it;
// without --mmproj, with a text model that has
// no image tokens, or with the mmproj given as the model, it fails naming the fix.
TEST(CliVision, GgufModelWithMmprojGivesTheGoldenPromptAndTokens) {
  const fs::path dir = temp_dir("gguf");
  const std::string gguf = write_tiny_llama4_vision_gguf(dir).string();
  const std::string mmproj = asset("gguf/tiny-llama4-vision/mmproj-tiny-llama4-vision-f16.gguf");
  const json& p = golden()["prompts"][0];
  const std::string image = kModel + "/images/" + p["images"][0].get<std::string>();
  const std::string text = p["messages"][0]["content"][1]["text"];
  for (const std::string& draft : std::vector<std::string>{"", " -d " + kDraft + " -k 3"}) {
    ProcessResult r = run_cli(fmt::format("run -m {} --mmproj {} --image {} --chat -p \"{}\" -n 32 --ignore-eos --json "
                                          "--top-logits 5{}",
                                          gguf, mmproj, image, text, draft));
    ASSERT_EQ(r.code, 0) << r.out;
    json j = last_json(r);
    EXPECT_EQ(j["prompt_tokens"], p["prompt_ids"]) << draft;
    EXPECT_EQ(j["tokens"], p["greedy_ids"]) << draft;
    for (size_t i = 0; i < 5; ++i) {
      EXPECT_EQ(j["prompt_top_logits"][i][0], p["last_pos_top5"]["ids"][i]) << draft << " rank " << i;
      EXPECT_NEAR(j["prompt_top_logits"][i][1].get<double>(), p["last_pos_top5"]["logits"][i].get<double>(), 2e-3)
          << draft << " rank " << i;
    }
  }
  ProcessResult r = run_process(fmt::format("{} inspect --json {} --mmproj {} 2>/dev/null", EAGLEVK_CLI, gguf, mmproj));
  ASSERT_EQ(r.code, 0) << r.out;
  json v = json::parse(r.out)["vision"];
  EXPECT_TRUE(v["usable"].get<bool>()) << v.dump();
  EXPECT_EQ(v["tokens_per_tile"], golden()["tokens_per_tile"]);
  EXPECT_EQ(v["max_tiles"], golden()["preprocess"]["max_patches"]);
  // The vision file alone: what eaglevk reads of it.
  r = run_process(fmt::format("{} inspect --json {} 2>/dev/null", EAGLEVK_CLI, mmproj));
  ASSERT_EQ(r.code, 0) << r.out;
  json m = json::parse(r.out);
  EXPECT_EQ(m["projector_type"], "llama4");
  EXPECT_EQ(m["text_hidden_size"], 256);
  EXPECT_EQ(m["vision_config"]["image_size"], golden()["preprocess"]["tile"]);
  EXPECT_EQ(m["tensor_types"]["F16"]["tensors"], 16);  // the matrices; norms and biases are F32
  const ProcessResult no_mmproj = run_cli(fmt::format("run -m {} --image {} --chat -p hi -n 1", gguf, image));
  expect_clean_failure(no_mmproj, "a GGUF file holds the text model only");
  EXPECT_NE(no_mmproj.out.find("eaglevk: error: --mmproj: "), std::string::npos) << no_mmproj.out;
  expect_clean_failure(run_cli(fmt::format("run -m {} --mmproj {} --image {} --chat -p hi -n 1",
                                           asset("gguf/tiny-llama4/tiny-llama4-f16.gguf"), mmproj, image)),
                       "no <|image_start|> token");
  expect_clean_failure(run_cli(fmt::format("run -m {} -p hi -n 1", mmproj)), "vision (mmproj) file, not a model");
  expect_clean_failure(run_cli(fmt::format("run -m {} --mmproj {} -p hi -n 1", asset("tiny-llama3"), mmproj)),
                       "goes with a Llama-4 text model");
  fs::remove_all(dir);
}

TEST(CliVision, InspectSaysWhetherTheVisionTowerIsUsable) {
  ProcessResult r = run_process(fmt::format("{} inspect --json {} 2>/dev/null", EAGLEVK_CLI, kModel));
  ASSERT_EQ(r.code, 0) << r.out;
  json v = json::parse(r.out)["vision"];
  EXPECT_TRUE(v["usable"].get<bool>()) << v.dump();
  EXPECT_EQ(v["tokens_per_tile"], golden()["tokens_per_tile"]);
  EXPECT_EQ(v["tile"], golden()["preprocess"]["tile"]);
  EXPECT_EQ(v["max_tiles"], golden()["preprocess"]["max_patches"]);
  r = run_process(fmt::format("{} inspect --json {} 2>/dev/null", EAGLEVK_CLI, asset("tiny-llama4")));
  ASSERT_EQ(r.code, 0) << r.out;
  v = json::parse(r.out)["vision"];
  EXPECT_FALSE(v["usable"].get<bool>());
  EXPECT_NE(v["reason"].get<std::string>().find("placeholders"), std::string::npos) << v.dump();
}

TEST(CliVision, BadImagesAndModelsWithoutAVisionTowerFailCleanly) {
  fs::path dir = temp_dir("bad");
  const std::string good = kModel + "/images/grad_h56_w56.png";
  // A PNG cut in the middle of its pixel data, a JPEG whose header is garbage, a GIF.
  std::string png;
  {
    std::ifstream in(good, std::ios::binary);
    png.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::ofstream(dir / "cut.png", std::ios::binary) << png.substr(0, png.size() / 2);
  std::ofstream(dir / "bad.jpg", std::ios::binary) << std::string("\xFF\xD8\xFF\xE0\x00\x02garbage garbage", 22);
  std::ofstream(dir / "anim.gif", std::ios::binary) << "GIF89a\x01\x00\x01\x00";
  const std::string chat = " --chat -p hi -n 2";
  expect_clean_failure(run_cli(fmt::format("run -m {} --image {}{}", kModel, (dir / "cut.png").string(), chat)), "cut.png");
  expect_clean_failure(run_cli(fmt::format("run -m {} --image {}{}", kModel, (dir / "bad.jpg").string(), chat)), "bad.jpg");
  expect_clean_failure(run_cli(fmt::format("run -m {} --image {}{}", kModel, (dir / "anim.gif").string(), chat)), "anim.gif");
  expect_clean_failure(run_cli(fmt::format("run -m {} --image {}{}", kModel, (dir / "none.png").string(), chat)), "none.png");
  // Images need the chat template's user turn.
  expect_clean_failure(run_cli(fmt::format("run -m {} --image {} -p hi -n 2", kModel, good)), "--chat");
  // pair B's tiny-llama4 has a tower with placeholder image ids; tiny-llama3 has none.
  expect_clean_failure(run_cli(fmt::format("run -m {} --image {}{}", asset("tiny-llama4"), good, chat)), "placeholders");
  expect_clean_failure(run_cli(fmt::format("run -m {} --image {}{}", asset("tiny-llama3"), good, chat)), "no vision tower");
  // Five 2x2 images take 5 x 27 tokens: more than a 64-token context holds.
  const std::string noise = kModel + "/images/noise_h112_w112.png";
  std::string five;
  for (int i = 0; i < 5; ++i) five += " --image " + noise;
  expect_clean_failure(run_cli(fmt::format("run -m {} --ctx 64{}{}", kModel, five, chat)), "context");
  // A messages file naming an image that is not there, and one with an unknown part type.
  std::ofstream(dir / "missing.json") << R"([{"role": "user", "content": [{"type": "image", "image": "nope.png"}]}])";
  std::ofstream(dir / "video.json") << R"([{"role": "user", "content": [{"type": "video", "video": "a.mp4"}]}])";
  expect_clean_failure(run_cli(fmt::format("run -m {} --messages {} -n 2", kModel, (dir / "missing.json").string())), "nope.png");
  expect_clean_failure(run_cli(fmt::format("run -m {} --messages {} -n 2", kModel, (dir / "video.json").string())), "video");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace eaglevk::testing
