/* eaglevk C API: load a Llama-3 / Llama-4 checkpoint (and optionally an EAGLE-3 draft head),
 * tokenize, and generate on a Vulkan device, with speculative decoding when a draft is loaded.
 * C99; link with -leaglevk (pkg-config: eaglevk).
 *
 * Conventions
 * - Functions return an eaglevk_status; on failure eaglevk_last_error() says why. The message
 *   is thread-local and is cleared at the start of every call that returns a status.
 * - Objects: a runtime (one Vulkan device), models loaded on it, sessions made from a model.
 *   A model keeps its runtime alive and a session its model, so they may be freed in any
 *   order. The *_destroy / *_free functions accept NULL.
 * - Threads: a session serves one call at a time. Different sessions may generate on different
 *   threads; calls that use a runtime's device queue (model load, session create, generate)
 *   take turns on it, so a token callback must not make those calls on the same runtime.
 * - Buffers: functions that fill a caller buffer take (buffer, capacity, out count). When the
 *   capacity is too small they write nothing, return EAGLEVK_ERROR_BUFFER_TOO_SMALL and set
 *   the out count to the size needed; a NULL buffer with capacity 0 is a size query.
 * - Text is UTF-8 and NUL-terminated.
 */
#ifndef EAGLEVK_H
#define EAGLEVK_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define EAGLEVK_API __attribute__((visibility("default")))
#else
#define EAGLEVK_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum eaglevk_status {
  EAGLEVK_OK = 0,
  EAGLEVK_ERROR_INVALID_ARGUMENT = 1, /* a NULL pointer, a value out of range, invalid UTF-8 */
  EAGLEVK_ERROR_IO = 2,               /* a folder or file that does not exist */
  EAGLEVK_ERROR_MODEL = 3,            /* a broken checkpoint or config; a draft that does not fit the target */
  EAGLEVK_ERROR_DEVICE = 4,           /* no usable Vulkan device; a failed Vulkan call or allocation */
  EAGLEVK_ERROR_CONTEXT_FULL = 5,     /* the prompt does not fit the session's context */
  EAGLEVK_ERROR_BUFFER_TOO_SMALL = 6, /* the out count holds the size needed */
  EAGLEVK_ERROR_INTERNAL = 7,         /* anything else (a bug) */
  /* The device was lost (VK_ERROR_DEVICE_LOST: a driver reset, a GPU fault) or did not finish
   * a submission within EAGLEVK_FENCE_TIMEOUT seconds (default 600; 7200 on a CPU device).
   * Every later call that needs the device returns it too; free the sessions, models and
   * runtime and create a new runtime. The host process is unaffected. */
  EAGLEVK_ERROR_DEVICE_LOST = 8,
  /* Device or host memory ran out (an allocation failed); the runtime stays usable. */
  EAGLEVK_ERROR_OUT_OF_MEMORY = 9
} eaglevk_status;

typedef struct eaglevk_runtime eaglevk_runtime;
typedef struct eaglevk_model eaglevk_model;
typedef struct eaglevk_session eaglevk_session;

/* "0.6.0": the library's version (the soname is libeaglevk.so.0). */
EAGLEVK_API const char* eaglevk_version(void);
/* A constant name for a status: "EAGLEVK_OK", ... */
EAGLEVK_API const char* eaglevk_status_string(eaglevk_status status);
/* The message of the calling thread's last failed call; "" after a successful one. */
EAGLEVK_API const char* eaglevk_last_error(void);

/* ---- runtime ---- */

/* device: an index ("0") or a case-insensitive part of the device name; NULL or "" takes the
 * environment's EAGLEVK_DEVICE, else the best device (discrete, integrated, virtual, CPU).
 * EAGLEVK_VALIDATE=1 in the environment turns on the Khronos validation layer. */
EAGLEVK_API eaglevk_status eaglevk_runtime_create(const char* device, eaglevk_runtime** out);
/* Since 0.7: a runtime over several devices, for a model larger than one. Models loaded on it
 * place their layers as contiguous ranges on the devices in order (the embeddings with the first,
 * the output and the EAGLE-3 draft with the last; hidden states pass between them through host
 * memory), and generate the tokens one device would. devices[i] names a device as
 * eaglevk_runtime_create does; a device named twice is opened twice, each its own logical device.
 * shares: `count` positive numbers, each device's share of the layers, or NULL to share them in
 * proportion to each device's memory. A model that fits no split is EAGLEVK_ERROR_DEVICE with
 * every device's numbers. count 1 is eaglevk_runtime_create. */
EAGLEVK_API eaglevk_status eaglevk_runtime_create_split(const char* const* devices, const double* shares, size_t count,
                                                        eaglevk_runtime** out);
EAGLEVK_API void eaglevk_runtime_destroy(eaglevk_runtime* runtime);
/* The chosen device's name; valid while the runtime lives. NULL for a NULL runtime. */
EAGLEVK_API const char* eaglevk_runtime_device_name(const eaglevk_runtime* runtime);

/* ---- model ---- */

/* target_dir: a Hugging Face folder (config.json, model.safetensors or an index, tokenizer.json).
 * draft_dir: an EAGLE-3 head folder, or NULL (not ""). A draft that does not fit the target (hidden
 * size, vocabulary, tap layers) is EAGLEVK_ERROR_MODEL. */
EAGLEVK_API eaglevk_status eaglevk_model_load(eaglevk_runtime* runtime, const char* target_dir, const char* draft_dir,
                                              eaglevk_model** out);
/* Since 0.6: eaglevk_model_load with llama.cpp's vision file for a Llama-4 model (mmproj-*.gguf, what
 * llama.cpp's multimodal tools take with --mmproj). Its vision tower gives the model images
 * (eaglevk_model_supports_images, eaglevk_generate_with_images); target is then usually a Llama-4
 * GGUF file whose vocabulary has the image tokens. mmproj NULL: eaglevk_model_load. A file that is
 * not a Llama-4 vision file, or that does not fit the text model, is EAGLEVK_ERROR_MODEL; a
 * missing one EAGLEVK_ERROR_IO. */
EAGLEVK_API eaglevk_status eaglevk_model_load_with_mmproj(eaglevk_runtime* runtime, const char* target,
                                                          const char* draft_dir, const char* mmproj,
                                                          eaglevk_model** out);
EAGLEVK_API void eaglevk_model_free(eaglevk_model* model);

typedef struct eaglevk_model_info {
  int32_t vocab_size;        /* the target's; token ids are 0 .. vocab_size - 1 */
  int32_t max_context;       /* max_position_embeddings */
  int32_t bos_id;            /* -1 when the tokenizer has none */
  int32_t has_draft;         /* 1 when loaded with a draft head */
  int32_t has_chat_template; /* 1 when eaglevk_apply_chat_template can render */
} eaglevk_model_info;
EAGLEVK_API eaglevk_status eaglevk_model_get_info(const eaglevk_model* model, eaglevk_model_info* out);

/* Text to ids. add_bos nonzero applies the tokenizer's post-processor (BOS in front for
 * Llama-3 and Llama-4), as Hugging Face's add_special_tokens=True. Special-token strings in
 * the text ("<|eot_id|>") map to their ids. */
EAGLEVK_API eaglevk_status eaglevk_tokenize(const eaglevk_model* model, const char* text, int add_bos, int32_t* ids,
                                            size_t capacity, size_t* out_count);

/* Ids to text. The capacity counts the terminating NUL; *out_length does not (the size needed
 * is *out_length + 1). skip_special nonzero leaves out BOS, EOS, headers. */
EAGLEVK_API eaglevk_status eaglevk_detokenize(const eaglevk_model* model, const int32_t* ids, size_t count,
                                              int skip_special, char* text, size_t capacity, size_t* out_length);

typedef struct eaglevk_chat_message {
  const char* role; /* "system", "user", "assistant" */
  const char* content;
} eaglevk_chat_message;

/* Renders a conversation with the model's own chat template (its Jinja program, as transformers renders it).
 * add_generation_prompt nonzero appends the assistant header. The text holds BOS when the template writes it:
 * tokenize it with add_bos = 0. Same buffer protocol as eaglevk_detokenize. */
EAGLEVK_API eaglevk_status eaglevk_apply_chat_template(const eaglevk_model* model, const eaglevk_chat_message* messages,
                                                       size_t count, int add_generation_prompt, char* text,
                                                       size_t capacity, size_t* out_length);

/* ---- session ---- */

typedef struct eaglevk_session_params {
  uint32_t context;        /* prompt + generated tokens (default 2048); clipped to the model's max_context */
  uint32_t k;              /* draft tokens per round (default 3); 0: no speculation; ignored without a draft */
  float temperature;       /* 0 (default): greedy; speculation then equals plain greedy decoding */
  int32_t top_k;           /* 0 (default): off */
  float top_p;             /* 1 (default): off */
  uint64_t seed;           /* the sampling stream: the same seed gives the same tokens */
  uint32_t max_new_tokens; /* default 64 */
  int32_t ignore_eos;      /* nonzero: keep going through end-of-sequence tokens */
  /* Since 0.2: tree drafting (EAGLE-2 dynamic tree), SGLang's meanings. spec_steps > 0 turns it
   * on instead of the chain of k: spec_steps draft levels (--speculative-num-steps), spec_topk
   * children per node (0: 1), spec_draft_tokens verified tokens including the root (0: with
   * spec_topk 1, spec_steps + 1). Lossless greedy and at temperature > 0 (with a seed, the
   * output equals plain sampling's). Default 0: the chain. */
  uint32_t spec_steps;
  uint32_t spec_topk;
  uint32_t spec_draft_tokens;
  /* Since 0.5. The speculative scheme at temperature > 0 with chain drafting: 0 (default)
   * draws each draft token from the draft's own distribution and accepts it with min(1, p/q),
   * which accepts more; nonzero proposes the draft's argmax (vLLM's default with EAGLE). Both
   * keep the target's distribution. (0.4 and earlier proposed the argmax.) */
  int32_t greedy_drafts;
  /* Since 0.5: generation ends at the first of these texts (UTF-8, not empty); the callback's
   * pieces end before it, and out_tokens ends with the token that completed it. The strings
   * are copied when the session is created. NULL with stop_count 0: none. */
  const char* const* stop_strings;
  size_t stop_count;
  /* Since 0.5: N > 0 records each generated token's log-probability (the log-softmax of the
   * target's raw logits) and the N most likely tokens at its step, for
   * eaglevk_session_get_logprobs (at most 20). 0: off. */
  uint32_t logprobs;
} eaglevk_session_params;

/* The struct grows at its end from version to version. These two calls take the size the
 * caller was compiled with (sizeof(eaglevk_session_params)), read and write only that much and
 * give later fields their defaults, so a program built against an older header keeps working
 * with a newer library. Programs use the two wrappers below, which pass the size. */
EAGLEVK_API void eaglevk_session_params_init(eaglevk_session_params* params, size_t size);
EAGLEVK_API eaglevk_status eaglevk_session_create_sized(eaglevk_model* model, const eaglevk_session_params* params,
                                                        size_t size, eaglevk_session** out);

#ifndef EAGLEVK_BUILDING_LIBRARY
/* The defaults above. */
static inline eaglevk_session_params eaglevk_session_params_default(void) {
  eaglevk_session_params p;
  eaglevk_session_params_init(&p, sizeof p);
  return p;
}

/* Allocates the session's device state (KV caches). params NULL: the defaults. */
static inline eaglevk_status eaglevk_session_create(eaglevk_model* model, const eaglevk_session_params* params,
                                                    eaglevk_session** out) {
  return eaglevk_session_create_sized(model, params, sizeof(eaglevk_session_params), out);
}
#endif
EAGLEVK_API void eaglevk_session_free(eaglevk_session* session);

/* Called for each generated token with its text: whole UTF-8 characters, special tokens left
 * out, so often "" (a character split over tokens comes with its last token). Return nonzero
 * to stop. After the last token, bytes of an unfinished character, if any, come in one more
 * call with token -1 (as U+FFFD). The pieces concatenate to the detokenized ids with
 * skip_special. */
typedef int (*eaglevk_token_callback)(int32_t token, const char* text_piece, void* user);

/* Generates from prompt ids (a new sequence each call) until max_new_tokens, an end-of-sequence
 * token (which is included), the callback's stop, or a full context. callback may be NULL.
 * out_tokens (may be NULL) receives the generated ids; its capacity must be at least
 * max_new_tokens, checked before generating. out_count (may be NULL) receives their number.
 * A prompt of context or more tokens is EAGLEVK_ERROR_CONTEXT_FULL. A logits row holding a NaN
 * or an infinity (a model with NaN weights) stops generation with EAGLEVK_ERROR_MODEL, and
 * eaglevk_last_error() names the position whose token it was to decide. */
EAGLEVK_API eaglevk_status eaglevk_generate(eaglevk_session* session, const int32_t* prompt, size_t prompt_count,
                                            eaglevk_token_callback callback, void* user, int32_t* out_tokens,
                                            size_t capacity, size_t* out_count);

/* Since 0.5: continues the session's sequence (the last call's prompt and generated tokens)
 * with next (e.g. the next user turn, rendered by the chat template and tokenized with
 * add_bos = 0) and generates, as eaglevk_generate does. The KV caches of the sequence are
 * kept: only next is prefilled, and at temperature 0 the tokens equal those of
 * eaglevk_generate on the whole sequence. Without an earlier sequence, or after one with
 * images, it is eaglevk_generate(next). A sequence that would not fit is
 * EAGLEVK_ERROR_CONTEXT_FULL (the session keeps its sequence). */
EAGLEVK_API eaglevk_status eaglevk_continue(eaglevk_session* session, const int32_t* next, size_t next_count,
                                            eaglevk_token_callback callback, void* user, int32_t* out_tokens,
                                            size_t capacity, size_t* out_count);

/* ---- images (since 0.3) ----
 * Llama-4 vision models (Llama4ForConditionalGeneration with its vision tower) take images in
 * the prompt. An image is either an encoded PNG or JPEG file in memory (width = height = 0,
 * size = its bytes), or 8-bit RGB pixels, row-major, size = width * height * 3. */
typedef struct eaglevk_image {
  const uint8_t* data;
  size_t size;
  uint32_t width;  /* 0 with height 0: data is a PNG or JPEG file */
  uint32_t height;
} eaglevk_image;
/* EAGLEVK_OK with *out_supported = 1 when the model takes images; otherwise
 * EAGLEVK_ERROR_MODEL, *out_supported = 0, and eaglevk_last_error() says why (a text-only
 * checkpoint, a GGUF file loaded without its mmproj, placeholder image token ids). */
EAGLEVK_API eaglevk_status eaglevk_model_supports_images(const eaglevk_model* model, int* out_supported);
/* eaglevk_generate with images: the prompt holds one "<|image|>" placeholder token per image, in
 * order (render a chat whose user content has "<|image|>" where each image goes, then tokenize;
 * special-token strings map to their ids). Each placeholder becomes the image's token layout
 * (tiles of <|patch|> tokens) whose embeddings are the image's features from the vision tower;
 * a draft head sees the image only through the target's hidden states, as in vLLM. A broken or
 * unsupported image, or a count that differs from the placeholders, is
 * EAGLEVK_ERROR_INVALID_ARGUMENT; a model without a vision tower EAGLEVK_ERROR_MODEL; an
 * expanded prompt longer than the context EAGLEVK_ERROR_CONTEXT_FULL. */
EAGLEVK_API eaglevk_status eaglevk_generate_with_images(eaglevk_session* session, const int32_t* prompt,
                                                        size_t prompt_count, const eaglevk_image* images,
                                                        size_t image_count, eaglevk_token_callback callback,
                                                        void* user, int32_t* out_tokens, size_t capacity,
                                                        size_t* out_count);
/* Speculative decoding counters of the session's last eaglevk_generate, in vLLM's terms. Without
 * speculation (or after a failed call) the counters are 0 and mean_acceptance_length is 1. */
typedef struct eaglevk_spec_stats {
  uint64_t num_drafts;          /* verify passes that carried draft tokens */
  uint64_t num_draft_tokens;    /* proposed tokens */
  uint64_t num_accepted_tokens; /* accepted proposals (bonus tokens excluded) */
  uint64_t num_output_tokens;   /* generated tokens */
  double mean_acceptance_length; /* 1 + accepted / drafts */
  size_t num_positions;         /* entries of the per-position acceptance (up to k) */
} eaglevk_spec_stats;

/* Fills *out and writes min(capacity, out->num_positions) rates into acceptance: [i] is the
 * fraction of drafts whose token i was accepted. acceptance may be NULL with capacity 0. */
EAGLEVK_API eaglevk_status eaglevk_session_get_stats(const eaglevk_session* session, eaglevk_spec_stats* out,
                                                     double* acceptance, size_t capacity);

/* Since 0.5, with params.logprobs = N > 0: generated token `index` of the session's last call,
 * its log-probability in *logprob (may be NULL), and the N most likely tokens at its step,
 * most likely first: min(capacity, N) of them into top_ids and top_logprobs (either may be
 * NULL with capacity 0); *out_count (may be NULL) receives N. An index past the last call's
 * tokens, or a session without logprobs, is EAGLEVK_ERROR_INVALID_ARGUMENT. */
EAGLEVK_API eaglevk_status eaglevk_session_get_logprobs(const eaglevk_session* session, size_t index, float* logprob,
                                                        int32_t* top_ids, float* top_logprobs, size_t capacity,
                                                        size_t* out_count);

/* ---- batches (since 0.7): several sequences of one model decoding together ----
 * A batch runs up to `sequences` generations at once (continuous batching, as a server does):
 * each starts with eaglevk_batch_start between rounds, every eaglevk_batch_step runs one round
 * of all running sequences in one submission (the weights are read once for all of them), and a
 * finished sequence's tokens are taken with eaglevk_batch_take, which frees its id for the next.
 * With a draft, rounds are chain speculation of k tokens per sequence. At temperature 0 each
 * sequence's tokens equal eaglevk_generate's on it alone, whichever sequences run beside it.
 * Sequences that run together may differ in every sampling setting (temperature, top_k, top_p,
 * seed): each samples with its own, and its tokens equal its run alone.
 * A batch is used from one thread at a time; batches and sessions of one model may run on
 * different threads. */
typedef struct eaglevk_batch eaglevk_batch;

typedef struct eaglevk_batch_params {
  uint32_t sequences;    /* the most sequences at once, 1..64 (default 8) */
  uint32_t context;      /* per sequence, prompt + generated (default 2048); clipped to max_context */
  uint32_t k;            /* draft tokens per round with a draft, 1..16 (default 3); 0: no speculation */
  int32_t greedy_drafts; /* as eaglevk_session_params.greedy_drafts */
} eaglevk_batch_params;

/* One sequence's settings, as the same fields of eaglevk_session_params. */
typedef struct eaglevk_sequence_params {
  float temperature;
  int32_t top_k;
  float top_p;
  uint64_t seed;
  uint32_t max_new_tokens;
  int32_t ignore_eos;
  const char* const* stop_strings; /* copied by eaglevk_batch_start */
  size_t stop_count;
} eaglevk_sequence_params;

/* Both structs may grow at their ends, as eaglevk_session_params: the _sized calls take the
 * size the caller was compiled with; programs use the inline wrappers. */
EAGLEVK_API void eaglevk_batch_params_init(eaglevk_batch_params* params, size_t size);
EAGLEVK_API void eaglevk_sequence_params_init(eaglevk_sequence_params* params, size_t size);
/* Allocates the batch's device state: `sequences` KV caches of `context` tokens. A batch that
 * does not fit the device is EAGLEVK_ERROR_DEVICE, naming what it needs. */
EAGLEVK_API eaglevk_status eaglevk_batch_create_sized(eaglevk_model* model, const eaglevk_batch_params* params,
                                                      size_t size, eaglevk_batch** out);
EAGLEVK_API void eaglevk_batch_free(eaglevk_batch* batch);
/* Starts a sequence: checks the prompt and settings, prefills the prompt and emits the first
 * token (through the callback, as eaglevk_generate's; user is passed back to it, so one callback
 * can serve every sequence). *out_id receives the sequence's id, 0..sequences-1. All ids in use
 * (finished ones not yet taken) is EAGLEVK_ERROR_INVALID_ARGUMENT; a prompt of context or more
 * tokens EAGLEVK_ERROR_CONTEXT_FULL. */
EAGLEVK_API eaglevk_status eaglevk_batch_start_sized(eaglevk_batch* batch, const int32_t* prompt, size_t prompt_count,
                                                     const eaglevk_sequence_params* params, size_t size,
                                                     eaglevk_token_callback callback, void* user, uint32_t* out_id);
/* One round of every running sequence. The ids that finished in it (or in eaglevk_batch_start
 * since the last step) go to finished_ids (capacity at least `sequences`, or NULL with 0 to
 * only count them) and their number to *out_count (may be NULL). A failed round (e.g.
 * EAGLEVK_ERROR_MODEL for a non-finite logits row) leaves the batch unusable: free it. */
EAGLEVK_API eaglevk_status eaglevk_batch_step(eaglevk_batch* batch, uint32_t* finished_ids, size_t capacity,
                                              size_t* out_count);
/* *out_running = 1 while a sequence is running or finished but not yet reported by a step. */
EAGLEVK_API eaglevk_status eaglevk_batch_running(const eaglevk_batch* batch, int* out_running);
/* A finished sequence's generated ids (out_tokens may be NULL; capacity at least its count,
 * which *out_count receives, else EAGLEVK_ERROR_BUFFER_TOO_SMALL and nothing is taken) and its
 * speculation counters (stats may be NULL); frees the id. A running id is
 * EAGLEVK_ERROR_INVALID_ARGUMENT. */
EAGLEVK_API eaglevk_status eaglevk_batch_take(eaglevk_batch* batch, uint32_t id, int32_t* out_tokens,
                                              size_t capacity, size_t* out_count, eaglevk_spec_stats* stats);
/* Ends a running sequence at the next round (a caller that went away); take it once a step has
 * reported it. */
EAGLEVK_API eaglevk_status eaglevk_batch_cancel(eaglevk_batch* batch, uint32_t id);

#ifndef EAGLEVK_BUILDING_LIBRARY
static inline eaglevk_batch_params eaglevk_batch_params_default(void) {
  eaglevk_batch_params p;
  eaglevk_batch_params_init(&p, sizeof p);
  return p;
}
static inline eaglevk_sequence_params eaglevk_sequence_params_default(void) {
  eaglevk_sequence_params p;
  eaglevk_sequence_params_init(&p, sizeof p);
  return p;
}
/* params NULL: the defaults. */
static inline eaglevk_status eaglevk_batch_create(eaglevk_model* model, const eaglevk_batch_params* params,
                                                  eaglevk_batch** out) {
  return eaglevk_batch_create_sized(model, params, sizeof(eaglevk_batch_params), out);
}
static inline eaglevk_status eaglevk_batch_start(eaglevk_batch* batch, const int32_t* prompt, size_t prompt_count,
                                                 const eaglevk_sequence_params* params,
                                                 eaglevk_token_callback callback, void* user, uint32_t* out_id) {
  return eaglevk_batch_start_sized(batch, prompt, prompt_count, params, sizeof(eaglevk_sequence_params), callback,
                                   user, out_id);
}
#endif

#ifdef __cplusplus
}
#endif

#endif /* EAGLEVK_H */
