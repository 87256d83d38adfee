/* A program as it was built against version 0.1's header: the session parameters had 8 fields
 * and eaglevk_session_params_default / eaglevk_session_create were plain exported functions.
 * It declares them itself (not from eaglevk.h) and runs a speculative generation on the current
 * libeaglevk.so, surrounded by guard bytes that the library must not touch. argv[1]: assets. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef enum { V1_OK = 0 } v1_status;
typedef struct v1_runtime v1_runtime;
typedef struct v1_model v1_model;
typedef struct v1_session v1_session;

typedef struct v1_session_params {
  uint32_t context;
  uint32_t k;
  float temperature;
  int32_t top_k;
  float top_p;
  uint64_t seed;
  uint32_t max_new_tokens;
  int32_t ignore_eos;
} v1_session_params;

int eaglevk_runtime_create(const void* options, v1_runtime** out);
void eaglevk_runtime_destroy(v1_runtime* runtime);
int eaglevk_model_load(v1_runtime* runtime, const char* model_path, const char* draft_path, v1_model** out);
void eaglevk_model_free(v1_model* model);
v1_session_params eaglevk_session_params_default(void);
int eaglevk_session_create(v1_model* model, const v1_session_params* params, v1_session** out);
void eaglevk_session_free(v1_session* session);
int eaglevk_generate(v1_session* session, const int32_t* prompt, size_t prompt_count, void* callback, void* user,
                     int32_t* out_tokens, size_t capacity, size_t* out_count);
const char* eaglevk_last_error(void);

struct guarded_params {
  v1_session_params params;
  unsigned char guard[64];
};

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  char target[4096], draft[4096];
  snprintf(target, sizeof target, "%s/tiny-llama3", argv[1]);
  snprintf(draft, sizeof draft, "%s/tiny-llama3-eagle3", argv[1]);
  struct guarded_params g;
  memset(g.guard, 0xA5, sizeof g.guard);
  g.params = eaglevk_session_params_default();
  for (size_t i = 0; i < sizeof g.guard; ++i)
    if (g.guard[i] != 0xA5) {
      fprintf(stderr, "capi_v1_abi_check: the defaults wrote past the 0.1 struct\n");
      return 1;
    }
  if (g.params.context != 2048 || g.params.k != 3 || g.params.max_new_tokens != 64) {
    fprintf(stderr, "capi_v1_abi_check: wrong defaults\n");
    return 1;
  }
  /* Bytes after the struct that a newer library would read as tree fields: nonsense values. */
  memset(g.guard, 0xFF, sizeof g.guard);
  g.params.k = 3;
  g.params.max_new_tokens = 8;
  g.params.context = 128;
  g.params.ignore_eos = 1;
  v1_runtime* rt = NULL;
  v1_model* model = NULL;
  v1_session* session = NULL;
  int32_t prompt[3] = {1, 450, 13};
  int32_t out[8];
  size_t n = 0;
  int rc = 1;
  if (eaglevk_runtime_create(NULL, &rt) != V1_OK) goto done;
  if (eaglevk_model_load(rt, target, draft, &model) != V1_OK) goto done;
  if (eaglevk_session_create(model, &g.params, &session) != V1_OK) goto done;
  if (eaglevk_generate(session, prompt, 3, NULL, NULL, out, 8, &n) != V1_OK) goto done;
  if (n != 8) goto done;
  rc = 0;
done:
  if (rc) fprintf(stderr, "capi_v1_abi_check: %s\n", eaglevk_last_error());
  eaglevk_session_free(session);
  eaglevk_model_free(model);
  eaglevk_runtime_destroy(rt);
  return rc;
}
