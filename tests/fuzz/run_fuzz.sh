#!/usr/bin/env bash
# Fuzzes one parser for SECONDS (default 60): builds eaglevk_TARGET_fuzz with clang's libFuzzer,
# ASan and UBSan in $BUILD (default build-fuzz/), seeds a corpus, runs it. Further arguments go
# to libFuzzer (e.g. -runs=1000000). Exits non-zero when the fuzzer finds a crash, a sanitizer
# report, a leak, a timeout or an out-of-memory; the input that did it is left in
# $BUILD/fuzz-artifacts-TARGET/. The corpus grows in $BUILD/fuzz-corpus-TARGET/ across runs.
#
#   bash tests/fuzz/run_fuzz.sh TARGET [SECONDS] [libFuzzer flags...]
#
# Targets, and their seeds (tests/fuzz/TARGET.dict is the dictionary when there is one;
# tests/fuzz/make_seeds.py writes the hand-made seeds under tests/fuzz/seeds/):
#   gguf           the GGUF parser: tests/fuzz/seeds/*.gguf (every value type, every dtype,
#                  alignments 32 and 64) and the first 256 KiB of each assets/gguf file.
#   image          PNG/JPEG decoding and the Llama-4 preprocessing: the PNGs of
#                  assets/tiny-llama4-vision/images and tests/fuzz/seeds/image/.
#   safetensors    .safetensors files and model.safetensors.index.json: seeds/safetensors/.
#   config         config.json (Llama-3, Llama-4, EAGLE-3 both layouts) and generation_config:
#                  every assets/*/config.json and generation_config.json, seeds/config/.
#   tokenizer      tokenizer.json, and encode/decode of text: the assets' tokenizer.json files and
#                  prompts (with their mode byte), seeds/tokenizer/.
#   chat_template  the Jinja engine and rendering: the assets' chat templates, dataset
#                  messages and seeds/chat_template/.
#   jinja_grammar  the Jinja engine's bounds: every input is a template from a grammar of loops,
#                  macros and filters; seeded with a few fixed byte strings (below). Runs under
#                  a 1 GiB memory cap (-rss_limit_mb), the render's own budget being 32 MiB.
#   dataset        the JSONL datasets of `eaglevk eval`: assets/*/prompts.jsonl, tests/data/*.jsonl.
#   serve_request  `eaglevk serve`'s request bodies (chat and completion): seeds/serve_request/.
set -euo pipefail
target=${1:?usage: run_fuzz.sh TARGET [SECONDS] [libFuzzer flags...]}
seconds=${2:-60}
shift $(($# < 2 ? $# : 2))
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${BUILD:-$root/build-fuzz}"
seeds="$root/tests/fuzz/seeds"

# Mode bytes: tokenizer and chat_template inputs start with a byte whose parity picks what the
# rest is (even: a tokenizer.json / a template; odd: text / a conversation).
with_mode() {  # with_mode BYTE SRC DST
  { printf "$1"; cat "$2"; } >"$3"
}
chat_template_of() {  # the chat_template string of a tokenizer_config.json
  python3 -c 'import json,sys; t=json.load(open(sys.argv[1])).get("chat_template"); print(t if isinstance(t, str) else "", end="")' "$1"
}

corpus="$build/fuzz-corpus-$target"
artifacts="$build/fuzz-artifacts-$target"
max_len=16384
rss_limit_mb=2048
extra=()
case "$target" in
  gguf) max_len=262144 ;;
  image) max_len=65536 ;;
  safetensors) max_len=65536 ;;
  tokenizer) max_len=262144 ;;
  # Every byte of a jinja_grammar input is a choice: long inputs from the start (len_control=0)
  # reach the nested loops and macros that short ones cannot. Its renders free many large
  # strings, which ASan's quarantine (256 MB by default) keeps: a smaller one lets the 1 GiB
  # cap measure what the engine holds (peak RSS over the corpus: 1,153 MB with the default
  # quarantine, 209 MB with 16 MB).
  jinja_grammar)
    max_len=1024; rss_limit_mb=1024; extra=(-len_control=0)
    export ASAN_OPTIONS="${ASAN_OPTIONS:-quarantine_size_mb=64}" ;;
  config | chat_template | dataset | serve_request) ;;
  *) echo "run_fuzz.sh: unknown target '$target' (gguf, image, safetensors, config, tokenizer, chat_template, jinja_grammar, dataset, serve_request)" >&2
     exit 2 ;;
esac

CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DEAGLEVK_FUZZ=ON -DEAGLEVK_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" --target "eaglevk_${target}_fuzz" -- -j2

mkdir -p "$corpus" "$artifacts"
# FUZZ_EMPTY_CORPUS=1: start from nothing (a fresh, empty corpus and no seeds), where the
# mutations go other ways than from the seeds (a number overflow in a dataset line was found so).
if [ "${FUZZ_EMPTY_CORPUS:-0}" = 1 ]; then
  corpus="$build/fuzz-corpus-$target-empty"
  rm -rf "$corpus" && mkdir -p "$corpus"
  target_seeds=none
else
  target_seeds=$target
fi
case "$target_seeds" in
  gguf)
    cp "$seeds"/*.gguf "$corpus"/
    find "$root/assets/gguf" -name '*.gguf' -print0 | while IFS= read -r -d '' f; do
      head -c 262144 "$f" >"$corpus/head-$(basename "$f")"
    done ;;
  image) cp "$root"/assets/tiny-llama4-vision/images/*.png "$seeds"/image/* "$corpus"/ ;;
  safetensors) cp "$seeds"/safetensors/* "$corpus"/ ;;
  config)
    for f in "$root"/assets/*/config.json "$root"/assets/*/generation_config.json "$root"/assets/gguf/*/config.json; do
      cp "$f" "$corpus/$(basename "$(dirname "$f")")-$(basename "$f")"
    done
    cp "$seeds"/config/* "$corpus"/ ;;
  tokenizer)
    for dir in "$root"/assets/tiny-llama3 "$root"/assets/tiny-llama4-vision; do
      with_mode '\000' "$dir/tokenizer.json" "$corpus/$(basename "$dir")-tokenizer.json"
    done
    with_mode '\001' "$root/assets/tiny-llama3/prompts.jsonl" "$corpus/prompts-text"
    cp "$seeds"/tokenizer/* "$corpus"/ ;;
  chat_template)
    for dir in "$root"/assets/tiny-llama3 "$root"/assets/tiny-llama4-vision; do
      chat_template_of "$dir/tokenizer_config.json" >"$corpus/tmp"
      with_mode '\000' "$corpus/tmp" "$corpus/$(basename "$dir")-template"
    done
    rm -f "$corpus/tmp"
    cp "$seeds"/chat_template/* "$corpus"/ ;;
  jinja_grammar)
    # Byte strings that pick loops, the deepening step and macro calls (jinja_grammar_fuzz.cpp).
    printf '\001\003\013\002\003\002\000\002\005\001\004' >"$corpus/seed-loop-deepen"
    printf '\002\003\010\000\002\001\000\010\004\001\000\003\005\005' >"$corpus/seed-macros"
    printf '\000\000\013\002\077\007\001\003\002\000\001' >"$corpus/seed-chain" ;;
  dataset) cp "$root"/assets/tiny-llama3/prompts.jsonl "$root"/tests/data/*.jsonl "$corpus"/ ;;
  serve_request) cp "$seeds"/serve_request/* "$corpus"/ ;;
esac

dict=()
[[ -f "$root/tests/fuzz/$target.dict" ]] && dict=(-dict="$root/tests/fuzz/$target.dict")
# libFuzzer returns non-zero on any finding; set -e turns that into this script's status.
"$build/eaglevk_${target}_fuzz" "$corpus" "${dict[@]}" -max_total_time="$seconds" -rss_limit_mb="$rss_limit_mb" \
  -max_len="$max_len" -timeout=10 -print_final_stats=1 -artifact_prefix="$artifacts/" "${extra[@]}" "$@"
