// A prompt's prefill, in every mode: chunks of prompt rows through the target (with the taps a
// draft reads, image rows and the prompt reports) and the draft's catch-up on the rows whose
// next token is known; each chunk is one submission.
#include <algorithm>

#include "runtime/engine/decoder.h"

namespace eaglevk::engine {

void Decoder::record_prefill_chunk(const Sequence& s, uint32_t slot, const PrefillChunk& chunk) {
  const GenerationOptions& o = s.options;
  const uint32_t n = uint32_t(s.history.size()), H = target_.config().hidden_size, V = target_.config().vocab_size;
  const uint32_t rows = chunk.rows, draft_rows = draft_ ? chunk.draft_rows : 0, n_logits = chunk.logits_rows();
  const uint64_t H3 = 3ull * H;
  ops::OpContext oc{gpu_, rec_};
  const ops::IntVec t_slots = input(in_.target_slots), d_slots = input(in_.draft_slots);
  rec_.begin();
  rec_.copy(vk::BufferRange(upload_), vk::BufferRange(inputs_), "inputs");
  rec_.copy(vk::BufferRange(inputs_, in_.target_ids * 4ull, rows * 4), vk::BufferRange(tstate_.ids, 0, rows * 4),
            "inputs");
  rec_.copy(vk::BufferRange(inputs_, in_.target_positions * 4ull, rows * 4),
            vk::BufferRange(tstate_.positions, 0, rows * 4), "inputs");
  models::ForwardPass target_pass{rows, chunk.begin + rows, chunk.logits_from, false,
                                  draft_ ? &prefill_taps_ : nullptr};
  target_pass.slots = regions(t_slots);
  models::EmbeddingOverride image_rows;
  if (o.images) {
    image_rows = o.images->override_for(chunk.begin, rows);
    target_pass.embeddings = &image_rows;
  }
  models::record_target_forward(oc, target_, tstate_, target_pass);
  if (draft_rows) {
    models::DraftPass pass;
    pass.rows = draft_rows;
    pass.from_taps = true;
    pass.taps = prefill_taps_.out;
    pass.ids = input(in_.draft_ids);
    pass.positions = input(in_.draft_positions);
    pass.kv_len = chunk.begin + draft_rows;
    pass.out_token = ops::IntVec{round_ids_, RoundIds{batch_}.draft(0, 0)};  // unused: the first round proposes again
    if (batch_ > 1) {
      pass.slots = &d_slots;
      pass.proposals = 1;
      pass.proposal_rows = input(in_.proposal_rows);
    }
    models::record_eagle3_forward(oc, *draft_, dstate_, {target_.embed(), target_.lm_head()}, pass);
  }
  const ops::Act logits(tstate_.arena[tstate_.logits], V);
  if (chunk.last && !o.sampling.greedy()) {
    // The first token samples with the sequence's record (prefill() writes record 0), as a
    // plain chunk's does.
    const ops::IntVec settings = input(in_.row_sampling);
    ops::sample(oc, logits.row(n_logits - 1), 1, V, nullptr, ops::IntVec{tstate_.out_ids, n_logits - 1},
                ops::IntVec{tstate_.accept, n_logits - 1}, ops::SampleParams{.first_position = n, .row_params = &settings});
  }
  const vk::BufferRange back(readback_);
  if (n_logits)
    rec_.copy(vk::BufferRange(tstate_.out_ids, 0, n_logits * 4), back.sub(out_.tokens * 4ull, n_logits * 4), "tokens");
  if (chunk.last && (o.top_logits || o.logprobs))
    rec_.copy(tstate_.arena[tstate_.logits].sub(uint64_t(n_logits - 1) * V * 4, uint64_t(V) * 4),
              back.sub(out_.logits * 4ull, uint64_t(V) * 4), "logits");
  if (tap_sink_ && draft_)
    rec_.copy(vk::BufferRange(prefill_tap_rows_, 0, rows * H3 * 4), back.sub(out_.taps * 4ull, rows * H3 * 4), "taps");
  // Position n - 1's taps feed the slot's first catch-up row.
  if (chunk.last && draft_)
    rec_.copy(vk::BufferRange(prefill_tap_rows_, (rows - 1) * H3 * 4, H3 * 4),
              vk::BufferRange(round_tap_rows_, (round_rows_ + slot) * H3 * 4, H3 * 4), "taps");
}

void Decoder::prefill(Sequence& s, uint32_t slot, uint32_t from, std::vector<float>& last_logits) {
  const GenerationOptions& o = s.options;
  auto* up = static_cast<int32_t*>(upload_.mapped);
  const std::vector<int32_t>& prompt = s.history;
  const uint32_t n = uint32_t(prompt.size()), H = target_.config().hidden_size, V = target_.config().vocab_size;
  PrefillInputs inputs{up + in_.target_ids, up + in_.target_positions, up + in_.target_slots, slot * context_};
  if (draft_) {
    inputs.draft_ids = up + in_.draft_ids;
    inputs.draft_positions = up + in_.draft_positions;
    inputs.draft_slots = up + in_.draft_slots;
    inputs.draft_region = slot * draft_region_;
  }
  const auto* words = static_cast<const int32_t*>(readback_.mapped);
  for (const PrefillChunk& chunk : prefill_chunks(n, from, prefill_rows_, o.prompt_argmax)) {
    write_prefill_inputs(chunk, prompt, inputs);
    up[in_.proposal_rows] = int32_t(chunk.draft_rows > 0 ? chunk.draft_rows - 1 : 0);
    write_row_settings(o.sampling, up + in_.row_sampling);  // the last row samples with record 0
    if (!draft_ && !o.images) {
      // Without taps or image rows a chunk is a plain pass, which a later chunk or step of its
      // shape may replay (a 1-row last chunk is a decode step).
      RoundShape shape;
      shape.plain = PlainPassShape{chunk.rows, chunk.logits_from, false, chunk.last && (o.top_logits || o.logprobs),
                                   false, chunk.last && !o.sampling.greedy()};
      submit_round(shape, chunk.begin + chunk.rows, [&](vk::Recorder& rec, uint32_t kv_bound, bool) {
        record_plain_pass(rec, shape.plain, kv_bound);
      });
    } else {
      if (front_) {
        // Image rows enter at the first part, which embeds the tokens (its device holds the features).
        models::ForwardPass pass{chunk.rows, chunk.begin + chunk.rows, chunk.logits_from, false,
                                 draft_ ? &prefill_taps_ : nullptr};
        models::EmbeddingOverride image_rows;
        if (o.images) {
          image_rows = o.images->override_for(chunk.begin, chunk.rows);
          pass.embeddings = &image_rows;
        }
        run_split_front(pass);
      }
      record_prefill_chunk(s, slot, chunk);
      last_round_ = nullptr;
      rec_.submit_and_wait();
    }

    const uint32_t n_logits = chunk.logits_rows();
    const int32_t* tokens = words + out_.tokens;
    // Row r decided the token at position begin + logits_from + r + 1.
    for (uint32_t r = 0; r < n_logits; ++r) check_row_token(tokens[r], chunk.begin + chunk.logits_from + r + 1);
    if (o.prompt_argmax) s.result.prompt_argmax.insert(s.result.prompt_argmax.end(), tokens, tokens + n_logits);
    if (chunk.last) {
      s.y = tokens[n_logits - 1];
      if (o.top_logits || o.logprobs) {
        const auto* l = reinterpret_cast<const float*>(words + out_.logits);
        last_logits.assign(l, l + V);
      }
    }
    if (tap_sink_ && draft_) {
      TapRows t;
      t.tokens.assign(prompt.begin() + chunk.begin, prompt.begin() + chunk.begin + chunk.rows);
      for (uint32_t i = 0; i < chunk.rows; ++i) t.positions.push_back(int32_t(chunk.begin + i));
      const auto* h = reinterpret_cast<const float*>(words + out_.taps);
      t.hidden.assign(h, h + uint64_t(chunk.rows) * 3 * H);
      tap_sink_(t);
    }
  }
}

}  // namespace eaglevk::engine
