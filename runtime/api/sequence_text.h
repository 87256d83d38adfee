#pragma once
// One sequence's generated text as the facade hands it on: each token's piece (whole UTF-8
// characters, special tokens skipped) to the caller's callback, ending before the first stop
// string. Session and BatchSession stream through it, so both stop alike.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <eaglevk/eaglevk.hpp>

#include "runtime/engine/stop_text.h"

namespace eaglevk::api {

class SequenceText {
 public:
  SequenceText(const loader::Tokenizer& tokenizer, std::vector<std::string> stops, PieceCallback on_piece)
      : has_stops_(!stops.empty()), text_(tokenizer, std::move(stops)), on_piece_(std::move(on_piece)) {}

  // Takes a generated token; false when generation must stop (a stop string, or the callback).
  bool push(int32_t token);
  // At the end of the generation: the held-back bytes go to the callback (token -1), unless
  // the caller stopped it.
  void finish();
  bool stopped_by_caller() const { return stopped_by_caller_; }
  bool stopped_at_stop_string() const { return text_.stopped(); }
  // Whether push() has anything to do: with neither a callback nor stop strings, tokens need no text.
  bool needed() const { return bool(on_piece_) || has_stops_; }

 private:
  bool has_stops_;
  engine::GeneratedText text_;
  PieceCallback on_piece_;
  bool stopped_by_caller_ = false;
};

// A finished generation as the facade reports it: the engine's result and how the text ended.
void fill_output(GenerateOutput& out, engine::GenerationResult&& r, const SequenceText& text);

// Fails (InvalidArgument, tagged with the setting) unless the sampling settings, the logprobs
// count and the stop strings are valid: the one check behind Session and BatchSession.
void check_generation_settings(const engine::SamplingParams& sampling, uint32_t logprobs,
                               const std::vector<std::string>& stop);
// Fails unless every id is in the model's vocabulary and the prompt is not empty.
void check_prompt_ids(const Model& model, std::span<const int32_t> prompt, const char* what = "prompt token");

}  // namespace eaglevk::api
