#!/bin/sh
# sluice tokenize / detokenize against llama.cpp's ids for the bundled model
# (tests/fixtures/tinymoe_prompts.tsv).  Prints ok / not ok lines.
BIN=${SLUICE_BIN:-build/sluice}
MODEL=models/tinymoe-q8_0.gguf
FIX=tests/fixtures/tinymoe_prompts.tsv
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tab=$(printf '\t')

ok() { echo "ok $1"; }
fail() { echo "not ok $1: $2"; }

grep -v '^#' "$FIX" | while IFS="$tab" read -r flags prompt ids; do
    name="tokenize $flags '$prompt'"
    if [ "$flags" = "-" ]; then got=$("$BIN" tokenize -m "$MODEL" -p "$prompt" 2>&1)
    else got=$("$BIN" tokenize -m "$MODEL" "$flags" -p "$prompt" 2>&1); fi
    if [ "$got" = "$ids" ]; then ok "$name"; else fail "$name" "want $ids got $got"; fi
done

first=$(grep -v '^#' "$FIX" | head -n 1)
prompt=$(printf '%s\n' "$first" | cut -f 2)
ids=$(printf '%s\n' "$first" | cut -f 3)

printf '%s' "$prompt" >"$tmp/p.txt"
got=$("$BIN" tokenize -m "$MODEL" -f "$tmp/p.txt" 2>&1)
if [ "$got" = "$ids" ]; then ok "tokenize -f FILE"; else fail "tokenize -f FILE" "got $got"; fi
got=$(printf '%s' "$prompt" | "$BIN" tokenize -m "$MODEL" -f - 2>&1)
if [ "$got" = "$ids" ]; then ok "tokenize -f - (stdin)"; else fail "tokenize -f -" "got $got"; fi

got=$("$BIN" tokenize -m "$MODEL" -p "$prompt" --no-bos 2>&1)
if [ "$got" = "$ids" ]; then ok "tokenize --no-bos (GPT-2 adds none)"; else fail "tokenize --no-bos" "got $got"; fi

"$BIN" tokenize -m "$MODEL" -p "$prompt" --pieces >"$tmp/pieces" 2>&1
lines=$(wc -l <"$tmp/pieces")
count=$(printf '%s\n' "$ids" | tr -cd ',' | wc -c)
line1=$(head -n 1 "$tmp/pieces")
if [ "$lines" -eq $((count + 1)) ] && [ "$line1" = "1026${tab}It" ]; then ok "tokenize --pieces"
else fail "tokenize --pieces" "$lines lines, first '$line1'"; fi

# a character split over byte tokens: each part escaped, so every line stays
# valid UTF-8, and the unescaped pieces give the text back
"$BIN" tokenize -m "$MODEL" -p "🦙 é x" --no-bos --pieces >"$tmp/bytes" 2>&1
if ! command -v python3 >/dev/null 2>&1; then echo "skip tokenize --pieces on byte tokens: python3 not found"
elif python3 - "$tmp/bytes" <<'PY'
import re, sys
raw = open(sys.argv[1], 'rb').read()
text = raw.decode('utf-8')  # raises on a raw partial character
out = b''
for line in text.splitlines():
    piece = line.split('\t', 1)[1]
    out += re.sub(rb'\\x([0-9a-f]{2})', lambda m: bytes([int(m[1], 16)]), piece.encode())
assert out.decode() == '\U0001F999 \u00e9 x', out
assert '\\xf0\\x9f' in text or '\\xf0' in text, text
PY
then ok "tokenize --pieces escapes the bytes of a split character"
else fail "tokenize --pieces escapes the bytes of a split character" "$(head -c 200 "$tmp/bytes")"; fi

# detokenize: GPT-2 BPE gives the prompt back
got=$("$BIN" detokenize -m "$MODEL" "$ids" 2>&1)
if [ "$got" = "$prompt" ]; then ok "detokenize JSON array round trip"; else fail "detokenize round trip" "got '$got'"; fi
got=$("$BIN" detokenize -m "$MODEL" 5239 50256 5239 2>&1)
if [ "$got" = "texttext" ]; then ok "detokenize drops control tokens"; else fail "detokenize control" "got '$got'"; fi
got=$("$BIN" detokenize -m "$MODEL" --special 5239 50256 5239 2>&1)
if [ "$got" = "text<|endoftext|>text" ]; then ok "detokenize --special"; else fail "detokenize --special" "got '$got'"; fi
got=$(SLUICE_MODEL="$MODEL" "$BIN" tokenize -p "$prompt" 2>&1)
if [ "$got" = "$ids" ]; then ok "tokenize default model"; else fail "tokenize default model" "got $got"; fi

# errors: non-zero exit and a message on stderr
check_err() {
    name=$1; shift
    if "$@" >"$tmp/out" 2>"$tmp/err"; then fail "$name" "exit status 0"
    elif grep -q "error:" "$tmp/err"; then ok "$name"
    else fail "$name" "no error message: $(cat "$tmp/err")"; fi
}
check_err "detokenize rejects an id outside the vocabulary" "$BIN" detokenize -m "$MODEL" 50257
check_err "detokenize rejects a malformed id" "$BIN" detokenize -m "$MODEL" 12x
check_err "tokenize needs -p or -f" "$BIN" tokenize -m "$MODEL"
check_err "tokenize rejects an unknown option" "$BIN" tokenize -m "$MODEL" -p x --bogus
check_err "tokenize reports a missing model" "$BIN" tokenize -m "$tmp/none.gguf" -p x
check_err "tokenize reports a missing file" "$BIN" tokenize -m "$MODEL" -f "$tmp/none.txt"
exit 0
