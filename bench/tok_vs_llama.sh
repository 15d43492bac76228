#!/bin/sh
# Builds bench/tok_vs_llama against a llama.cpp build and runs it on the
# given GGUFs (default: the bundled model and ../shared/vocab/*.gguf).
#   LLAMA_DIR=/path/to/llama.cpp sh bench/tok_vs_llama.sh [fuzz N [SEED] | file PATH] [MODEL.gguf...]
# LLAMA_DIR needs include/, ggml/include/ and build/bin/libllama.so.
set -eu
BUILD=${BUILD:-build}
LLAMA_DIR=${LLAMA_DIR:-../llama.cpp}
SHARED=${SLUICE_SHARED:-../shared}
[ -f "$LLAMA_DIR/build/bin/libllama.so" ] || { echo "no $LLAMA_DIR/build/bin/libllama.so (set LLAMA_DIR)" >&2; exit 2; }
make -s "$BUILD/libsluice.a"
# sluice and ggml both have gguf_* functions: link sluice into one object
# whose symbols are all local except the few the tool calls
cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc -c bench/tok_vs_llama_sl.c -o "$BUILD/tok_vs_llama_sl.o"
ld -r -o "$BUILD/tok_vs_llama_sluice.o" "$BUILD/tok_vs_llama_sl.o" --whole-archive "$BUILD/libsluice.a"
objcopy -w --keep-global-symbol='sl_side_open' --keep-global-symbol='vocab_*' "$BUILD/tok_vs_llama_sluice.o"
cc -O2 -std=c11 -D_GNU_SOURCE -I"$LLAMA_DIR/include" -I"$LLAMA_DIR/ggml/include" \
    -o "$BUILD/tok_vs_llama" bench/tok_vs_llama.c "$BUILD/tok_vs_llama_sluice.o" \
    -L"$LLAMA_DIR/build/bin" -lllama -Wl,-rpath,"$(cd "$LLAMA_DIR/build/bin" && pwd)" \
    -luring -lpcre2-8 -lutf8proc -lmicrohttpd -ljansson -lxxhash -ledit -lm -pthread
mode=fuzz arg=2000 seed=1
case "${1:-}" in
fuzz) mode=fuzz; arg=$2; shift 2; case "${1:-}" in [0-9]*) seed=$1; shift ;; esac ;;
file) mode=file; arg=$2; shift 2 ;;
esac
[ $# -gt 0 ] || set -- models/tinymoe-q8_0.gguf "$SHARED"/vocab/*.gguf
status=0
for m in "$@"; do
    [ -f "$m" ] || continue
    printf '%s: ' "$m"
    if [ "$mode" = fuzz ]; then "$BUILD/tok_vs_llama" "$m" fuzz "$arg" "$seed" || status=1
    else "$BUILD/tok_vs_llama" "$m" file "$arg" || status=1; fi
done
exit $status
