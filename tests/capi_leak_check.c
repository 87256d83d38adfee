/* Run under valgrind (ctest capi_valgrind): the C API's whole life cycle, twice in one process,
 * so that anything a load, a session or a generation leaks shows as a definite leak. Small on
 * purpose: lavapipe under valgrind is slow. argv[1]: the assets folder. */
#include <stdio.h>
#include <string.h>

#include <eaglevk/eaglevk.h>

static int check(eaglevk_status status, const char* what) {
  if (status == EAGLEVK_OK) return 0;
  fprintf(stderr, "capi_leak_check: %s: %s: %s\n", what, eaglevk_status_string(status), eaglevk_last_error());
  return 1;
}

static int count_tokens(int32_t token, const char* piece, void* user) {
  (void)token;
  (void)piece;
  ++*(int*)user;
  return 0;
}

static int one_round(const char* assets) {
  char target[4096], draft[4096];
  snprintf(target, sizeof target, "%s/tiny-llama3", assets);
  snprintf(draft, sizeof draft, "%s/tiny-llama3-eagle3", assets);
  eaglevk_runtime* runtime = NULL;
  eaglevk_model* model = NULL;
  eaglevk_session* session = NULL;
  eaglevk_model* missing = NULL;
  int32_t prompt[16], out[4];
  size_t n_prompt = 0, n_out = 0;
  int streamed = 0, rc = 1;
  eaglevk_session_params params = eaglevk_session_params_default();
  params.k = 3;
  params.max_new_tokens = 4;
  params.context = 64;
  params.ignore_eos = 1;
  if (check(eaglevk_runtime_create(NULL, &runtime), "runtime")) goto done;
  if (check(eaglevk_model_load(runtime, target, draft, &model), "model")) goto done;
  if (check(eaglevk_tokenize(model, "The modules", 1, prompt, 16, &n_prompt), "tokenize")) goto done;
  if (check(eaglevk_session_create(model, &params, &session), "session")) goto done;
  if (check(eaglevk_generate(session, prompt, n_prompt, count_tokens, &streamed, out, 4, &n_out), "generate")) goto done;
  /* Failure paths allocate messages and throw: they must not leak either. */
  if (eaglevk_generate(session, prompt, 0, NULL, NULL, NULL, 0, NULL) != EAGLEVK_ERROR_INVALID_ARGUMENT) goto done;
  if (eaglevk_model_load(runtime, "/no/such/model", NULL, &missing) != EAGLEVK_ERROR_IO) goto done;
  if (n_out != 4 || streamed != 4) {
    fprintf(stderr, "capi_leak_check: generated %zu tokens, streamed %d\n", n_out, streamed);
    goto done;
  }
  rc = 0;
done:
  eaglevk_session_free(session);
  eaglevk_model_free(model);
  eaglevk_runtime_destroy(runtime);
  return rc;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s ASSETS_DIR\n", argv[0]);
    return 2;
  }
  for (int round = 0; round < 2; ++round)
    if (one_round(argv[1])) return 1;
  printf("capi_leak_check: two rounds done\n");
  return 0;
}
