// Stop strings (engine::StopText): the text passed on ends before the first stop string, text
// that may still become one is held back, and everything else comes out unchanged.
#include <gtest/gtest.h>

#include <eaglevk/error.h>

#include "runtime/engine/stop_text.h"

namespace eaglevk::engine {
namespace {

// Feeds pieces; returns what came out and whether it stopped.
std::pair<std::string, bool> feed(std::vector<std::string> stops, const std::vector<std::string>& pieces) {
  StopText t(std::move(stops));
  std::string out;
  for (const std::string& p : pieces) {
    out += t.push(p);
    if (t.stopped()) return {out, true};
  }
  return {out + t.flush(), false};
}

TEST(StopText, EndsBeforeTheFirstStopString) {
  EXPECT_EQ(feed({"###"}, {"Hello", " wor", "ld##", "# more"}), std::make_pair(std::string("Hello world"), true));
  EXPECT_EQ(feed({"\n\n", "User:"}, {"a", "\n", "b Us", "er: c"}), std::make_pair(std::string("a\nb "), true));
  // The earliest match wins, whichever string it is.
  EXPECT_EQ(feed({"cd", "b"}, {"abcd"}), std::make_pair(std::string("a"), true));
  EXPECT_EQ(feed({"x"}, {"x"}), std::make_pair(std::string(""), true));
}

TEST(StopText, HoldsBackOnlyWhatMayBecomeAStopString) {
  StopText t({"END"});
  EXPECT_EQ(t.push("abc E"), "abc ");
  EXPECT_EQ(t.push("N"), "");
  EXPECT_EQ(t.push("x"), "ENx");  // "ENx" cannot begin "END" any more
  EXPECT_EQ(t.push("EN"), "");
  EXPECT_FALSE(t.stopped());
  EXPECT_EQ(t.flush(), "EN");  // the generation ended without the stop string
  EXPECT_EQ(feed({}, {"a", "b"}), std::make_pair(std::string("ab"), false));
  EXPECT_EQ(feed({"zz"}, {"z", "y", "z"}), std::make_pair(std::string("zyz"), false));
  EXPECT_THROW(StopText({""}), Error);
}

}  // namespace
}  // namespace eaglevk::engine
