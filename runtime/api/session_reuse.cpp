// Session::generate_reusing: a new sequence that keeps the caches of the prefix it shares with
// the last one (eval's multi-turn lines render each turn's whole conversation). Kept apart from
// session.cpp, whose generate and continue_sequence it sits beside.
#include <eaglevk/eaglevk.hpp>

#include "runtime/api/sequence_text.h"

namespace eaglevk::api {

GenerateOutput Session::generate_reusing(std::span<const int32_t> prompt, const PieceCallback& on_piece) {
  check_prompt_ids(*model_, prompt);
  if (prompt.size() >= context_)
    fail_as(ErrorKind::ContextFull,
            "the prompt has {} tokens but the context holds {} (one more is needed for the first new token)",
            prompt.size(), context_);
  // The decoder keeps what its caches hold and restarts where the prompt stops matching them.
  return run(std::vector<int32_t>(prompt.begin(), prompt.end()), on_piece, nullptr, /*reuse=*/true);
}

}  // namespace eaglevk::api
