// The C example (apps/examples/embed.c, linked with libeaglevk.so) as a process: its greedy
// k = 3 speculative output equals `eaglevk run --json` on the same pair and prompt, tokens,
// text and statistics.
#include <sys/wait.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "support/golden.h"
#include "support/process.h"

namespace eaglevk::testing {
namespace {

using Result = ProcessResult;
Result run(const std::string& command) { return run_process(command); }

// Single quotes for the shell.
std::string quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// The values after "key: " on the line starting with it (the last such line).
std::string field(const std::string& out, const std::string& key) {
  std::istringstream in(out);
  std::string line, value;
  bool found = false;
  while (std::getline(in, line))
    if (line.rfind(key + ":", 0) == 0) {
      value = line.substr(key.size() + 1);
      found = true;
    }
  EXPECT_TRUE(found) << "no '" << key << ":' line in:\n" << out;
  return value;
}

std::vector<int32_t> id_list(const std::string& text) {
  std::vector<int32_t> ids;
  std::istringstream in(text);
  int32_t id;
  while (in >> id) ids.push_back(id);
  return ids;
}

void compare(const std::string& prompt, int n) {
  Result embed = run(fmt::format("EAGLEVK_VALIDATE=1 {} --assets {} -n {} {} 2>/dev/null", EAGLEVK_EMBED,
                                 quoted(EAGLEVK_ASSETS), n, quoted(prompt)));
  ASSERT_EQ(embed.code, 0) << embed.out;
  Result cli = run(fmt::format("EAGLEVK_VALIDATE=1 {} run -m {} -d {} -k 3 -n {} -p {} --json 2>/dev/null",
                               EAGLEVK_CLI, quoted(asset("tiny-llama3")), quoted(asset("tiny-llama3-eagle3")), n,
                               quoted(prompt)));
  ASSERT_EQ(cli.code, 0) << cli.out;
  nlohmann::json j = nlohmann::json::parse(cli.out);

  std::vector<int32_t> tokens = id_list(field(embed.out, "ids"));
  EXPECT_EQ(tokens, j["tokens"].get<std::vector<int32_t>>()) << prompt;
  EXPECT_FALSE(tokens.empty());
  // The streamed text: the prompt, then the generated text.
  std::string want_text = prompt + j["text"].get<std::string>() + "\nids:";
  EXPECT_EQ(embed.out.substr(0, want_text.size()), want_text);
  const nlohmann::json& stats = j["stats"];
  EXPECT_EQ(std::stoull(field(embed.out, "num_drafts")), stats["num_drafts"].get<uint64_t>());
  EXPECT_EQ(std::stoull(field(embed.out, "num_draft_tokens")), stats["num_draft_tokens"].get<uint64_t>());
  EXPECT_EQ(std::stoull(field(embed.out, "num_accepted_tokens")), stats["num_accepted_tokens"].get<uint64_t>());
  EXPECT_EQ(field(embed.out, "mean acceptance length"),
            fmt::format(" {:.2f}", stats["mean_acceptance_length"].get<double>()));
  auto rates = stats["acceptance_per_position"].get<std::vector<double>>();
  ASSERT_EQ(rates.size(), 3u);
  for (size_t i = 0; i < rates.size(); ++i)
    EXPECT_EQ(field(embed.out, fmt::format("acceptance at token {}", i)), fmt::format(" {:.2f}", rates[i]));
}

TEST(Embed, EqualsCliOnTheDemoPrompt) { compare("The modules described in this chapter", 32); }

TEST(Embed, EqualsCliOnAGoldenPrompt) {
  std::string text = load_golden(asset("tiny-llama3")).raw["prompts"][3]["prompt_text"];
  compare(text, 20);
}

// The assets folder may come from the environment instead of --assets; a wrong one fails cleanly.
TEST(Embed, AssetsFromEnvironmentAndMissingAssets) {
  Result r = run(fmt::format("EAGLEVK_ASSETS={} {} -n 3 2>&1", quoted(EAGLEVK_ASSETS), EAGLEVK_EMBED));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(id_list(field(r.out, "ids")).size(), 3u);
  r = run(fmt::format("{} --assets /no/such/assets -n 3 2>&1", EAGLEVK_EMBED));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("EAGLEVK_ERROR_IO"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace eaglevk::testing
