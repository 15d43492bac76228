#!/bin/sh
# The examples/ programs, built by `make examples` against the public header
# only: examples/generate continues a prompt in two calls, and the text is
# llama.cpp's greedy continuation (tests/fixtures, from shared/golden).
. "$(dirname "$0")/../cli_lib.sh"
EX=$(dirname "$BIN")/examples/generate
need_python "api example tests"
if [ ! -x "$EX" ] || [ ! -f "$MODEL" ]; then
    notok "api example setup" "$EX or $MODEL missing (make examples)"
    exit 1
fi
GOLD=tests/fixtures/tinymoe-q8_0-greedy.json
prompt=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["results"][0]["prompt"])' "$GOLD")
"$EX" "$MODEL" "$prompt" 16 >"$T/ex.out" 2>"$T/ex.err"
rc=$?
if python3 - "$T/ex.out" "$GOLD" "$rc" <<'PY' >"$T/why" 2>&1; then ok "example: two calls continue llama.cpp's greedy text"; else notok "example: two calls continue llama.cpp's greedy text" "$(head -c 300 "$T/why")"; fi
import json, sys
out = open(sys.argv[1], encoding="utf-8").read()
assert sys.argv[3] == "0", "exit status " + sys.argv[3]
first, rest = out.split("\n--- continued:\n", 1)
second, tail = rest.rsplit("\n--- ", 1)
gold = json.load(open(sys.argv[2]))["results"][0]["generated_text"]
assert gold.startswith(first + second), "%r + %r is not a prefix of %r" % (first, second, gold[:200])
# 10 prompt tokens + 16 + 16 generated: the last sampled token is held too
assert " 42 tokens in the context" in tail, tail
PY
"$EX" "$T/none.gguf" "hi" >"$T/e.out" 2>"$T/e.err"
rc=$?
if [ $rc -eq 1 ] && grep -q "none.gguf" "$T/e.err"; then ok "example: a missing model is reported"; else notok "example: a missing model is reported" "exit $rc: $(head -c 200 "$T/e.err")"; fi
[ $fails -eq 0 ]
