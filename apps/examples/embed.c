/* embed.c: eaglevk from C. Loads the bundled tiny Llama-3 with its EAGLE-3 head, tokenizes a
 * prompt, generates greedily with k = 3 speculative decoding, streams the text, then prints the
 * generated ids and the speculative decoding statistics.
 *
 *   eaglevk_embed [--assets DIR] [-n N] [PROMPT]
 *
 * DIR holds tiny-llama3/ and tiny-llama3-eagle3/: --assets, else $EAGLEVK_ASSETS, else the
 * folder compiled in as EAGLEVK_ASSETS_DIR (the source tree's assets/ in the CMake build). The
 * installed copy is at $(pkg-config --variable=assetsdir eaglevk).
 *
 * Build against an installed eaglevk:
 *   cc -std=c99 embed.c $(pkg-config --cflags --libs eaglevk) -o embed
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <eaglevk/eaglevk.h>

#ifndef EAGLEVK_ASSETS_DIR
#define EAGLEVK_ASSETS_DIR ""
#endif

/* Streams each piece as it comes; returning 0 keeps generating. */
static int print_piece(int32_t token, const char* piece, void* user) {
  (void)token;
  (void)user;
  fputs(piece, stdout);
  fflush(stdout);
  return 0;
}

/* Nonzero (and a message) when a call failed. */
static int failed(eaglevk_status status, const char* what) {
  if (status == EAGLEVK_OK) return 0;
  fprintf(stderr, "embed: %s: %s: %s\n", what, eaglevk_status_string(status), eaglevk_last_error());
  return 1;
}

int main(int argc, char** argv) {
  const char* assets = getenv("EAGLEVK_ASSETS");
  const char* prompt = "The modules described in this chapter";
  unsigned long n = 32;
  int i;
  if (!assets || !*assets) assets = EAGLEVK_ASSETS_DIR;
  for (i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--assets") == 0 && i + 1 < argc) {
      assets = argv[++i];
    } else if (strcmp(argv[i], "-n") == 0 && i + 1 < argc) {
      char* end = NULL;
      n = strtoul(argv[++i], &end, 10);
      if (!*argv[i] || *end || n == 0 || n > 100000) {
        fprintf(stderr, "embed: -n takes a positive count\n");
        return 2;
      }
    } else if (argv[i][0] == '-') {
      fprintf(stderr, "usage: %s [--assets DIR] [-n N] [PROMPT]\n", argv[0]);
      return 2;
    } else {
      prompt = argv[i];
    }
  }
  if (!*assets) {
    fprintf(stderr, "embed: no assets folder: pass --assets DIR or set EAGLEVK_ASSETS\n");
    return 2;
  }

  char target_dir[4096], draft_dir[4096];
  snprintf(target_dir, sizeof target_dir, "%s/tiny-llama3", assets);
  snprintf(draft_dir, sizeof draft_dir, "%s/tiny-llama3-eagle3", assets);

  eaglevk_runtime* runtime = NULL;
  eaglevk_model* model = NULL;
  eaglevk_session* session = NULL;
  int32_t* prompt_ids = NULL;
  int32_t* generated = NULL;
  size_t n_prompt = 0, n_generated = 0;
  int rc = 1;
  eaglevk_status status;

  if (failed(eaglevk_runtime_create(NULL, &runtime), "creating the runtime")) goto done;
  fprintf(stderr, "embed: eaglevk %s on %s\n", eaglevk_version(), eaglevk_runtime_device_name(runtime));
  if (failed(eaglevk_model_load(runtime, target_dir, draft_dir, &model), "loading the model")) goto done;

  /* Ask for the size first, then tokenize into a buffer that fits. */
  status = eaglevk_tokenize(model, prompt, 1, NULL, 0, &n_prompt);
  if (status != EAGLEVK_ERROR_BUFFER_TOO_SMALL && failed(status, "tokenizing")) goto done;
  prompt_ids = malloc((n_prompt ? n_prompt : 1) * sizeof *prompt_ids);
  if (!prompt_ids) goto done;
  if (failed(eaglevk_tokenize(model, prompt, 1, prompt_ids, n_prompt, &n_prompt), "tokenizing")) goto done;

  eaglevk_session_params params = eaglevk_session_params_default();
  params.k = 3;                /* speculate 3 draft tokens per round */
  params.temperature = 0.0f;   /* greedy: the output equals the target's own greedy output */
  params.max_new_tokens = (uint32_t)n;
  if (failed(eaglevk_session_create(model, &params, &session), "creating the session")) goto done;

  generated = malloc(n * sizeof *generated);
  if (!generated) goto done;
  fputs(prompt, stdout);
  if (failed(eaglevk_generate(session, prompt_ids, n_prompt, print_piece, NULL, generated, n, &n_generated),
             "generating"))
    goto done;
  printf("\nids:");
  for (size_t j = 0; j < n_generated; ++j) printf(" %d", (int)generated[j]);
  printf("\n");

  eaglevk_spec_stats stats;
  double acceptance[8];
  if (failed(eaglevk_session_get_stats(session, &stats, acceptance, 8), "reading the statistics")) goto done;
  printf("num_drafts: %llu\nnum_draft_tokens: %llu\nnum_accepted_tokens: %llu\nmean acceptance length: %.2f\n",
         (unsigned long long)stats.num_drafts, (unsigned long long)stats.num_draft_tokens,
         (unsigned long long)stats.num_accepted_tokens, stats.mean_acceptance_length);
  for (size_t j = 0; j < stats.num_positions && j < 8; ++j) printf("acceptance at token %zu: %.2f\n", j, acceptance[j]);
  rc = 0;

done:
  free(generated);
  free(prompt_ids);
  eaglevk_session_free(session);
  eaglevk_model_free(model);
  eaglevk_runtime_destroy(runtime);
  return rc;
}
