#!/bin/sh
# Tokenizer throughput on ~1 MB of English: the Vim user manual when it is
# installed (/usr/share/vim/*/doc/usr_*.txt, the reference manual to fill up),
# else the English cases of the GPT-2 test fixture repeated.  Prints the
# median of 5 runs per vocabulary: the bundled model, and with ../shared the
# shared test vocabularies.
set -eu
BUILD=${BUILD:-build}
SHARED=${SLUICE_SHARED:-../shared}
make -s "$BUILD/libsluice.a"
cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc -o "$BUILD/tok_bench" bench/tok_bench.c "$BUILD/libsluice.a" \
    -luring -lpcre2-8 -lutf8proc -ljansson -lxxhash -lm -pthread
corpus=$(mktemp)
trap 'rm -f "$corpus"' EXIT
doc=$(ls -d /usr/share/vim/vim*/doc 2>/dev/null | head -n 1 || true)
if [ -n "$doc" ]; then
    cat "$doc"/usr_*.txt "$doc"/*.txt | head -c 1000000 >"$corpus"
    echo "corpus: first 1,000,000 bytes of $doc/usr_*.txt then *.txt"
else
    python3 -c '
import json, sys
d = json.load(open("tests/fixtures/gpt-2.tests.json"))
t = "\n".join(c["text"] for c in d["cases"] if not c["parse_special"] and c["text"].isascii())
out = (t + "\n") * (1000000 // (len(t) + 1) + 1)
sys.stdout.write(out[:1000000])' >"$corpus"
    echo "corpus: ASCII cases of tests/fixtures/gpt-2.tests.json repeated to 1,000,000 bytes"
fi
"$BUILD/tok_bench" models/tinymoe-q8_0.gguf "$corpus" 5
for v in ggml-vocab-llama-spm.gguf ggml-vocab-deepseek-llm.gguf ggml-vocab-deepseek-coder.gguf qwen3.gguf \
         llama3.gguf deepseek-v3.gguf gpt-oss.gguf; do
    [ -f "$SHARED/vocab/$v" ] && "$BUILD/tok_bench" "$SHARED/vocab/$v" "$corpus" 5
done
exit 0
