// The JSONL datasets of `eaglevk eval` (loader/dataset.h): host-only, so they are tested and
// fuzzed without Vulkan.
#include <gtest/gtest.h>

#include <eaglevk/error.h>

#include "loader/dataset.h"
#include "support/loader_test_util.h"

namespace {

using eaglevk::testing::expect_error;
using namespace eaglevk::loader;

TEST(Dataset, ParsesTheThreeLineForms) {
  auto d = parse_dataset("{\"prompt\": \"a\"}\n\n{\"turns\": [\"b\", \"c\"]}\n"
                         "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": \"u\"}]}\n",
                         "mem", true);
  ASSERT_EQ(d.items.size(), 3u);
  EXPECT_EQ(d.items[0].prompt, "a");
  EXPECT_EQ(d.items[1].line, 3u);
  EXPECT_EQ(d.items[1].turns.size(), 2u);
  EXPECT_EQ(d.items[2].messages[1].content, "u");
  EXPECT_THROW(parse_dataset("{\"messages\": [{\"role\": 1}]}\n", "mem", true), eaglevk::Error);
}

TEST(Dataset, BadLinesAreSkippedOrRefusedByLine) {
  const std::string text = "{\"prompt\": \"a\"}\r\n[1]\n{\"prompt\": 3}\n{\"turns\": []}\n{\"x\": 1}\n{\n";
  const Dataset d = parse_dataset(text, "mem", false);
  ASSERT_EQ(d.items.size(), 1u);
  ASSERT_EQ(d.problems.size(), 5u);
  EXPECT_EQ(d.problems[0].line, 2u);
  EXPECT_EQ(d.problems[0].message, "not a JSON object");
  EXPECT_EQ(d.problems[1].message, "'prompt' must be a string");
  EXPECT_EQ(d.problems[2].message, "'turns' is empty");
  EXPECT_EQ(d.problems[3].message, "no 'prompt', 'turns', 'messages' or 'conversations' field");
  expect_error([&] { parse_dataset(text, "mem", true); }, "mem:2: not a JSON object");
  expect_error([&] { parse_dataset("\n \t\n", "mem", false); }, "yields no prompt");
  // A line nested 100,000 deep parses (nlohmann does not recurse) and is reported, not a crash.
  const std::string deep = "{\"messages\": " + std::string(100000, '[') + std::string(100000, ']') + "}\n{\"prompt\": \"a\"}\n";
  EXPECT_EQ(parse_dataset(deep, "mem", false).problems.size(), 1u);
  // A number past a double's range is the line's problem too (nlohmann throws out_of_range, not
  // parse_error), with the file and line when strict.
  const std::string overflow = "{\"prompt\": \"a\"}\n{\"prompt\": \"hi\", \"x\": 4E9888882}\n";
  const Dataset o = parse_dataset(overflow, "mem", false);
  ASSERT_EQ(o.problems.size(), 1u);
  EXPECT_EQ(o.problems[0].line, 2u);
  EXPECT_NE(o.problems[0].message.find("number overflow"), std::string::npos) << o.problems[0].message;
  expect_error([&] { parse_dataset(overflow, "mem", true); }, "mem:2: invalid JSON");
}

// ShareGPT conversations: the human turns in order, the system entry as the system prompt,
// the recorded answers dropped; categories are names.
TEST(Dataset, ShareGptConversationsAndCategories) {
  const Dataset d = parse_dataset(
      "{\"category\": \"coding\", \"conversations\": [{\"from\": \"system\", \"value\": \"s\"}, "
      "{\"from\": \"human\", \"value\": \"q1\"}, {\"from\": \"gpt\", \"value\": \"a1\"}, "
      "{\"from\": \"human\", \"value\": \"q2\"}]}\n{\"prompt\": \"p\"}\n",
      "mem", true);
  ASSERT_EQ(d.items.size(), 2u);
  EXPECT_EQ(d.items[0].kind, DatasetItem::Kind::Turns);
  EXPECT_EQ(d.items[0].turns, (std::vector<std::string>{"q1", "q2"}));
  EXPECT_EQ(d.items[0].system, "s");
  EXPECT_EQ(d.items[0].category, "coding");
  EXPECT_EQ(d.items[1].category, "");
  const Dataset bad = parse_dataset(
      "{\"category\": 7, \"prompt\": \"p\"}\n{\"category\": [\"a\"], \"prompt\": \"p\"}\n"
      "{\"conversations\": [{\"from\": \"gpt\", \"value\": \"a\"}]}\n"
      "{\"conversations\": [{\"from\": \"robot\", \"value\": \"a\"}]}\n"
      "{\"conversations\": [{\"from\": \"human\", \"value\": 3}]}\n{\"conversations\": {}}\n"
      "{\"prompt\": \"ok\"}\n",
      "mem", false);
  ASSERT_EQ(bad.problems.size(), 6u);
  EXPECT_EQ(bad.problems[0].message, "'category' must be a string");
  EXPECT_EQ(bad.problems[1].message, "'category' must be a string");
  EXPECT_EQ(bad.problems[2].message, "'conversations' has no human turn");
  EXPECT_EQ(bad.problems[3].message, "'conversations': unknown speaker 'robot'");
  expect_error([&] { parse_dataset("{\"category\": 1.5, \"prompt\": \"p\"}\n", "mem", true); },
               "mem:1: 'category' must be a string");
}

}  // namespace
