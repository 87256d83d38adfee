// libFuzzer entry for `eaglevk serve`'s request bodies (tests/fuzz/run_fuzz.sh serve_request):
// every input is parsed as a chat and as a completion request. Each parse gives a request or a
// refusal with status 400 and a message; an accepted request's answer and chunks serialize.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "apps/cli/serve_request.h"
#include "apps/cli/serve_response.h"

using namespace eaglevk::cli::serve;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  for (Endpoint endpoint : {Endpoint::Chat, Endpoint::Completion}) {
    try {
      const Request r = parse_request(body, endpoint);
      if (r.model.empty() && !body.empty() && body.find("\"model\"") == std::string::npos) std::abort();
      if (endpoint == Endpoint::Chat ? r.messages.empty() : r.prompt.empty() && r.prompt_ids.empty()) std::abort();
      Answer a;
      a.text = r.prompt;  // any bytes: serialization must not throw on invalid UTF-8
      a.finish_reason = "stop";
      a.logprobs = {{r.prompt, -1, {{r.model, -2}}}};
      json_text(answer_json(r, {"x", 0, r.model}, a));
      json_text(chunk_json(r, {"x", 0, r.model}, r.prompt, true, std::nullopt));
    } catch (const RequestRefused& e) {
      if (e.error.status != 400 || e.error.message.empty()) std::abort();
    }
  }
  return 0;
}
