#!/bin/sh
# Speculative decoding through `sluice run`: with --temp 0 every draft kind
# (n-gram, the bundled draft model, random garbage) gives llama.cpp's greedy
# continuation (tests/fixtures/tinymoe-q8_0-greedy.json) bit for bit, fixed
# K and adaptive, the draft's head cut to its first ids or whole
# (--draft-vocab); --stats-json carries the "draft" object; bad flags fail.
. "$(dirname "$0")/../cli_lib.sh"
GOLD=tests/fixtures/tinymoe-q8_0-greedy.json
DRAFT=models/tinydraft-f16.gguf
need_python "cli draft tests"
if [ ! -x "$BIN" ] || [ ! -f "$MODEL" ] || [ ! -f "$DRAFT" ]; then
    notok "cli draft setup" "$BIN, $MODEL or $DRAFT missing"
    exit 1
fi
py() { code=$1; shift; python3 -c "import json, sys
$code" "$@"; }

for i in 0 2 5; do
    prompt=$(py 'print(json.load(open(sys.argv[1]))["results"][int(sys.argv[2])]["prompt"])' "$GOLD" "$i")
    for d in "ngram" "ngram --draft-max 3" "$DRAFT" "$DRAFT --draft-max 5" "$DRAFT --draft-max 4 --draft-vocab 512" \
        "$DRAFT --draft-vocab -1" "random --draft-max 2"; do
        # shellcheck disable=SC2086
        "$BIN" run -m "$MODEL" --json --temp 0 -n 64 -p "$prompt" --draft $d --stats-json "$T/st.json" >"$T/d.json" 2>"$T/d.err"
        if py '
out = json.load(open(sys.argv[1])); g = json.load(open(sys.argv[2]))["results"][int(sys.argv[3])]
assert out["ids"] == g["generated_ids"], "ids differ: %s" % out["ids"][:20]
d = json.load(open(sys.argv[4]))["draft"]
for k in ["mode", "proposed", "accepted", "acceptance", "acceptance_by_depth", "k_hist", "steps",
          "union_expert_bytes_per_accepted_token", "draft_s", "verify_s"]:
    assert k in d, "draft." + k + " missing"' "$T/d.json" "$GOLD" "$i" "$T/st.json" >"$T/why" 2>&1; then
            ok "run --draft $d, prompt $i = llama.cpp greedy golden"
        else
            notok "run --draft $d, prompt $i = llama.cpp greedy golden" "$(tail -c 300 "$T/why" "$T/d.err" | tr '\n' ' ')"
        fi
    done
done

err_case() { # NAME EXPECTED-SUBSTRING ARGS...
    name=$1 want=$2; shift 2
    if "$BIN" "$@" >"$T/e.out" 2>"$T/e.err"; then notok "$name" "exit status 0"
    elif grep -q "$want" "$T/e.err"; then ok "$name"
    else notok "$name" "$(head -c 200 "$T/e.err")"; fi
}
err_case "run --draft-max 17 is an error" "draft-max" run -m "$MODEL" -p hi --draft ngram --draft-max 17
err_case "run --draft-vocab -2 is an error" "draft-vocab" run -m "$MODEL" -p hi --draft "$DRAFT" --draft-vocab -2
LEAN=tests/fixtures/lean/models/qwen3-dense-lean-BF16.gguf
p0=$(py 'print(json.load(open(sys.argv[1]))["results"][0]["prompt"])' "$GOLD")
"$BIN" run -m "$MODEL" --json --temp 0 -n 64 -p "$p0" --draft "$LEAN" --draft-max 4 >"$T/x.json" 2>"$T/x.err"
if py 'g = json.load(open(sys.argv[2]))["results"][0]; assert json.load(open(sys.argv[1]))["ids"] == g["generated_ids"]' \
    "$T/x.json" "$GOLD" 2>"$T/why" && grep -q "another vocabulary (token 2047 differs" "$T/x.err"; then
    ok "run --draft of another vocabulary: says how they differ, drafts across them, golden output"
else
    notok "run --draft of another vocabulary" "$(tail -c 300 "$T/why" "$T/x.err" | tr '\n' ' ')"
fi
err_case "run --draft of a missing file is an error" "nonexistent" run -m "$MODEL" -p hi --draft "$T/nonexistent.gguf"
[ $fails -eq 0 ]
