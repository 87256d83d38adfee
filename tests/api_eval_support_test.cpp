// What `eaglevk eval` asks of the C++ facade beyond generate (issue 42 item 2), each against an
// independent path: a conversation's next turn rendered whole keeps the caches of the prefix it
// shares with the last sequence (Session::generate_reusing_prefix, BatchSession::start_at) and gives the
// tokens of prefilling it from scratch; BatchSession::collect hands on a sequence that ended in
// start(); set_draft_taps gives the acceptance of a load with those taps (LoadOptions::aux_layers)
// and refuses taps the draft cannot read; prepare_images gives the length Session::generate
// decodes; stop_reason names each way a generation ends; generations report their times.
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <eaglevk/eaglevk.hpp>

namespace eaglevk::testing {
namespace {

const std::string kAssets = EAGLEVK_ASSETS;
const std::string kTarget = kAssets + "/tiny-llama3", kDraft = kAssets + "/tiny-llama3-eagle3";
constexpr uint32_t kContext = 256;

const api::Runtime& runtime() {
  static const api::Runtime r = api::open_runtime();
  return r;
}

std::shared_ptr<const api::Model> load(std::vector<uint32_t> aux = {}) {
  api::LoadOptions o;
  o.draft = kDraft;
  o.aux_layers = std::move(aux);
  o.context = kContext;
  return api::load_model(runtime(), api::plan_load(runtime(), kTarget, o));
}

const std::shared_ptr<const api::Model>& model() {
  static const std::shared_ptr<const api::Model> m = load();
  return m;
}

api::SessionParams greedy(uint32_t n) {
  api::SessionParams p;
  p.context = kContext;
  p.max_new_tokens = n;
  p.ignore_eos = true;
  return p;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  return size_t(std::mismatch(a.begin(), a.begin() + std::min(a.size(), b.size()), b.begin()).first - a.begin());
}

// The next turn as eval builds it: the first prompt and most of its answer (not all: a
// re-rendered answer need not end in the tokens generated), then new text.
std::vector<int32_t> next_turn(const api::Model& m, const std::vector<int32_t>& prompt, const std::vector<int32_t>& out) {
  std::vector<int32_t> ids = prompt;
  ids.insert(ids.end(), out.begin(), out.end() - 3);
  const std::vector<int32_t> more = api::tokenize(m, " And then the story went on", false);
  ids.insert(ids.end(), more.begin(), more.end());
  return ids;
}

TEST(ApiEvalSupport, GenerateReusingKeepsTheSharedPrefixAndGivesTheTokensOfAFreshPrefill) {
  const api::Model& m = *model();
  const std::vector<int32_t> first = api::tokenize(m, "Once upon a time there was a little", true);
  for (uint32_t k : {0u, 3u}) {
    api::SessionParams p = greedy(12);
    p.k = k;
    api::Session session(model(), p);
    const api::GenerateOutput a = session.generate(first);
    const std::vector<int32_t> second = next_turn(m, first, a.tokens);
    const api::GenerateOutput reused = session.generate_reusing_prefix(second);
    api::Session fresh_session(model(), p);
    const api::GenerateOutput fresh = fresh_session.generate(second);
    EXPECT_EQ(reused.tokens, fresh.tokens) << "k " << k;
    EXPECT_EQ(fresh.reused_tokens, 0u);
    // The caches hold the first prompt and its answer but the last token; a draft's row i was
    // computed with token i + 1, so it keeps one position fewer.
    std::vector<int32_t> cached = first;
    cached.insert(cached.end(), a.tokens.begin(), a.tokens.end() - 1);
    const size_t same = std::min(common_prefix(second, cached), second.size() - 1);
    EXPECT_EQ(reused.reused_tokens, k ? same - 1 : same) << "k " << k;
    EXPECT_EQ(reused.prompt_tokens, second.size());
    EXPECT_GT(reused.prefill_seconds, 0);
    EXPECT_GT(reused.decode_seconds, 0);
  }
}

TEST(ApiEvalSupport, BatchStartAtReusesItsIdsCachesAndCollectHandsOnSequencesThatEndInStart) {
  const api::Model& m = *model();
  const std::vector<int32_t> first = api::tokenize(m, "The cat sat on the", true);
  const std::vector<int32_t> other = api::tokenize(m, "In a small village by the sea", true);
  api::BatchParams bp;
  bp.sequences = 2;
  bp.context = kContext;
  bp.k = 3;
  api::BatchSession batch(model(), bp);
  api::SequenceParams sp;
  sp.max_new_tokens = 10;
  sp.ignore_eos = true;
  const uint32_t a = batch.start_at(1, first, sp, /*reuse_prefix=*/false);
  const uint32_t b = batch.start(other, sp);
  EXPECT_EQ(a, 1u);
  EXPECT_EQ(b, 0u);
  EXPECT_NE(error_of([&] { batch.start_at(1, other, sp, false); }).find("sequence 1 is in use"), std::string::npos);
  EXPECT_NE(error_of([&] { batch.start_at(2, other, sp, false); }).find("no sequence 2"), std::string::npos);
  std::vector<api::GenerateOutput> outs(2);
  while (batch.running())
    for (uint32_t id : batch.step()) outs[id] = batch.take(id);
  // The next turn in id 1, with id 0's sequence running beside it, equals a fresh session's.
  const std::vector<int32_t> second = next_turn(m, first, outs[1].tokens);
  batch.start(other, sp);
  EXPECT_EQ(batch.start_at(1, second, sp, /*reuse_prefix=*/true), 1u);
  api::GenerateOutput reused;
  while (batch.running())
    for (uint32_t id : batch.step()) {
      api::GenerateOutput out = batch.take(id);
      if (id == 1) reused = std::move(out);
    }
  api::SessionParams p = greedy(10);
  api::Session session(model(), p);
  const api::GenerateOutput fresh = session.generate(second);
  EXPECT_EQ(reused.tokens, fresh.tokens);
  std::vector<int32_t> cached = first;
  cached.insert(cached.end(), outs[1].tokens.begin(), outs[1].tokens.end() - 1);
  // Kept: at most the shared prefix (less the draft's last row), and the first prompt at least,
  // which another id's sequence does not share.
  EXPECT_LE(reused.reused_tokens, std::min(common_prefix(second, cached), second.size() - 1) - 1);
  EXPECT_GE(reused.reused_tokens, first.size());
  EXPECT_EQ(fresh.reused_tokens, 0u);
  EXPECT_GT(reused.decode_seconds, 0);

  // One new token ends the sequence in start(): collect() reports it before any round, once.
  api::SequenceParams one = sp;
  one.max_new_tokens = 1;
  const uint32_t id = batch.start(first, one);
  EXPECT_FALSE(batch.finished(id));
  EXPECT_EQ(batch.collect(), std::vector<uint32_t>{id});
  EXPECT_TRUE(batch.finished(id));
  EXPECT_TRUE(batch.collect().empty());
  EXPECT_TRUE(batch.step().empty());
  const api::GenerateOutput out = batch.take(id);
  EXPECT_EQ(out.tokens, std::vector<int32_t>{outs[1].tokens.at(0)});  // the first prompt's first token
  EXPECT_STREQ(api::stop_reason(out), "length");
}

TEST(ApiEvalSupport, DraftTapsSetAfterLoadAcceptAsALoadWithThoseTaps) {
  const std::shared_ptr<const api::Model>& m = model();
  const std::vector<uint32_t> configured = api::model_info(*m).draft_taps;
  const uint32_t layers = api::model_info(*m).layers;
  ASSERT_EQ(configured.size(), 3u);
  std::vector<uint32_t> shifted = configured;
  for (uint32_t& id : shifted) id = std::min(id + 1, layers);
  ASSERT_NE(shifted, configured);
  const std::vector<int32_t> prompt = api::tokenize(*m, "A long time ago, in a land far away, a young girl found a", true);
  api::SessionParams p = greedy(24);
  auto run = [&](const std::shared_ptr<const api::Model>& model) { return api::Session(model, p).generate(prompt); };
  const api::GenerateOutput before = run(m);
  api::set_draft_taps(*m, shifted);
  EXPECT_EQ(api::model_info(*m).draft_taps, shifted);
  const api::GenerateOutput moved = run(m);
  api::set_draft_taps(*m, configured);
  const api::GenerateOutput restored = run(m);
  const api::GenerateOutput loaded = run(load(shifted));
  EXPECT_EQ(moved.tokens, before.tokens);  // greedy speculation is lossless whatever the taps
  // The shifted taps accept differently here, so a set_draft_taps that did nothing would fail.
  ASSERT_NE(loaded.stats.accepted_at, before.stats.accepted_at);
  EXPECT_EQ(moved.stats.num_accepted_tokens, loaded.stats.num_accepted_tokens);
  EXPECT_EQ(moved.stats.num_drafts, loaded.stats.num_drafts);
  EXPECT_EQ(moved.stats.accepted_at, loaded.stats.accepted_at);
  EXPECT_EQ(restored.stats.accepted_at, before.stats.accepted_at);
  EXPECT_EQ(restored.stats.num_drafts, before.stats.num_drafts);

  EXPECT_NE(error_of([&] { api::set_draft_taps(*m, {1, 2}); }).find("the draft taps 3 layers, got 2"), std::string::npos);
  EXPECT_NE(error_of([&] { api::set_draft_taps(*m, {1, 2, layers + 1}); }).find("out of range"), std::string::npos);
  EXPECT_NE(error_of([&] { api::set_draft_taps(*m, {2, 1, 3}); }).find("ascending and distinct"), std::string::npos);
  EXPECT_NE(error_of([&] { api::set_draft_taps(*m, {1, 1, 3}); }).find("ascending and distinct"), std::string::npos);
  EXPECT_EQ(api::model_info(*m).draft_taps, configured);  // a refused call changes nothing
}

TEST(ApiEvalSupport, StopReasons) {
  const api::Model& m = *model();
  const std::vector<int32_t> prompt = api::tokenize(m, "Once upon a time", true);
  api::SessionParams p = greedy(16);
  const api::GenerateOutput plain = api::Session(model(), p).generate(prompt);
  EXPECT_STREQ(api::stop_reason(plain), "length");
  // A stop string: the text of the fourth to sixth tokens.
  const std::string text =
      api::detokenize(m, std::vector<int32_t>(plain.tokens.begin() + 3, plain.tokens.begin() + 6), true);
  ASSERT_FALSE(text.empty());
  p.stop = {text};
  EXPECT_STREQ(api::stop_reason(api::Session(model(), p).generate(prompt)), "stop");
  p.stop = {};
  p.context = uint32_t(prompt.size()) + 4;
  EXPECT_STREQ(api::stop_reason(api::Session(model(), p).generate(prompt)), "context");
  api::GenerateOutput eos;
  eos.stopped_at_eos = true;
  EXPECT_STREQ(api::stop_reason(eos), "eos");
  EXPECT_NE(error_of([] { api::check_stop_strings({"a", ""}); }).find("a stop string is empty"), std::string::npos);
  EXPECT_EQ(error_of([] { api::check_stop_strings({"a"}); }), "(no error)");
}

TEST(ApiEvalSupport, PreparedImagePromptsHaveTheLengthGenerateDecodes) {
  api::LoadOptions o;
  o.context = 512;
  const auto vision = api::load_model(runtime(), api::plan_load(runtime(), kAssets + "/tiny-llama4-vision", o));
  const std::vector<loader::RgbImage> images = {
      loader::load_image(kAssets + "/tiny-llama4-vision/images/checker_h56_w112.png"),
      loader::load_image(kAssets + "/tiny-llama4-vision/images/small_h30_w40.png")};
  const std::vector<loader::ChatMessage> chat = {{"user", "<|image|>and<|image|>: what are they?"}};
  const std::vector<int32_t> prompt = api::tokenize(*vision, api::apply_chat_template(*vision, chat, true), false);
  const api::ImagePrompt prepared = api::prepare_images(*vision, prompt, images);
  const std::vector<int32_t>& ids = prepared.ids;
  EXPECT_GT(ids.size(), prompt.size() + 2);
  api::SessionParams p = greedy(2);
  p.context = 512;
  EXPECT_EQ(api::Session(vision, p).generate(prompt, {}, images).prompt_tokens, ids.size());
  // Generating from the prepared prompt is generating with the images.
  EXPECT_EQ(api::Session(vision, p).generate(prepared).tokens, api::Session(vision, p).generate(prompt, {}, images).tokens);
  EXPECT_NE(error_of([&] { api::prepare_images(*vision, prompt, std::span(images).first(1)); }), "(no error)");
  EXPECT_NE(error_of([&] { api::prepare_images(*model(), api::tokenize(*model(), "hi", true), images); }).find("cannot take images"),
            std::string::npos);
}

}  // namespace
}  // namespace eaglevk::testing
