#!/bin/sh
# End-to-end checks of `sluice run` and `sluice chat` on the bundled model:
# greedy output equals llama.cpp's (tests/fixtures/tinymoe-q8_0-greedy.json,
# copied from shared/golden/tinymoe.json), the JSON contract, --prompt-ids,
# --logits-out, --stop, streaming, chat over a pipe and error handling.
# Prints ok / not ok / skip lines like the C tests.  JSON is read with python3.
. "$(dirname "$0")/../cli_lib.sh"
GOLD=tests/fixtures/tinymoe-q8_0-greedy.json
check() { # NAME CONDITION-COMMAND... (message on failure from $T/why)
    name=$1; shift
    if "$@" >"$T/why" 2>&1; then ok "$name"; else notok "$name" "$(head -c 300 "$T/why" | tr '\n' ' ')"; fi
}

need_python "cli run tests"
if [ ! -x "$BIN" ] || [ ! -f "$MODEL" ]; then
    notok "cli run setup" "$BIN or $MODEL missing"
    exit 1
fi

# py 'python code' ARGS...: runs a snippet with sys.argv; fails with a message.
py() { code=$1; shift; python3 -c "import json, sys, struct
$code" "$@"; }

gold() { py 'd = json.load(open(sys.argv[1]))["results"][int(sys.argv[2])]; print(d[sys.argv[3]] if isinstance(d[sys.argv[3]], str) else ",".join(map(str, d[sys.argv[3]])))' "$GOLD" "$1" "$2"; }

# ---- greedy output equals llama.cpp's, for every golden prompt ----
n=$(py 'print(len(json.load(open(sys.argv[1]))["results"]))' "$GOLD")
i=0
while [ "$i" -lt "$n" ]; do
    prompt=$(gold "$i" prompt)
    "$BIN" run -m "$MODEL" --json --temp 0 -n 64 -p "$prompt" >"$T/g$i.json" 2>"$T/g$i.err"
    check "run greedy = llama.cpp golden, prompt $i" py '
out = json.load(open(sys.argv[1])); g = json.load(open(sys.argv[2]))["results"][int(sys.argv[3])]
assert out["prompt_ids"] == g["prompt_ids"], "prompt ids %s != %s" % (out["prompt_ids"], g["prompt_ids"])
first = next((k for k, (a, b) in enumerate(zip(out["ids"], g["generated_ids"])) if a != b), None)
assert out["ids"] == g["generated_ids"], "ids differ from token %s: %s vs %s" % (first, out["ids"][:70], g["generated_ids"])
assert out["text"] == g["generated_text"], "text differs"' "$T/g$i.json" "$GOLD" "$i"
    i=$((i + 1))
done

# ---- the JSON contract ----
check "run --json has every contract field" py '
o = json.load(open(sys.argv[1]))
for k, t in [("prompt_ids", list), ("ids", list), ("text", str), ("prompt_tokens", int), ("generated_tokens", int),
             ("prompt_tps", (int, float)), ("decode_tps", (int, float)), ("ttft_s", (int, float))]:
    assert k in o, "missing " + k
    assert isinstance(o[k], t), "%s has type %s" % (k, type(o[k]).__name__)
assert o["prompt_tokens"] == len(o["prompt_ids"]) and o["generated_tokens"] == len(o["ids"]), "counts"
assert o["prompt_tps"] > 0 and o["decode_tps"] > 0 and o["ttft_s"] > 0, "timings not positive"' "$T/g0.json"
check "run --json names what produced it: build, model, context, threads, KV types, sampling" py '
o = json.load(open(sys.argv[1]))["settings"]
assert o["build_commit"] and o["model"].endswith("tinymoe-q8_0.gguf") and o["n_ctx"] > 0 and o["threads"] >= 1, o
assert o["type_k"] == "f16" and o["flash_attn"] is True, o
s = o["sampling"]
assert s["temp"] == 0 and s["greedy"] is True and s["top_p"] == 0.95 and s["n_predict"] == 64, s' "$T/g0.json"
check "run --json stdout is exactly one JSON object" py '
s = open(sys.argv[1]).read(); json.loads(s); assert s.count("\n") == 1 and s.endswith("}\n"), repr(s[:80])' "$T/g0.json"

# ---- streaming text equals the JSON text ----
p0=$(gold 0 prompt)
"$BIN" run -m "$MODEL" --temp 0 -n 64 -p "$p0" >"$T/stream.txt" 2>"$T/stream.err"
check "run streamed text = JSON text" py '
assert open(sys.argv[1], encoding="utf-8").read() == json.load(open(sys.argv[2]))["text"]' "$T/stream.txt" "$T/g0.json"

# ---- --prompt-ids, --logits-out, default model ----
ids0=$(gold 0 prompt_ids)
"$BIN" run -m "$MODEL" --json --temp 0 -n 64 --prompt-ids "$ids0" --logits-out "$T/logits.f32" >"$T/ids.json" 2>"$T/ids.err"
check "run --prompt-ids = text prompt" py '
a = json.load(open(sys.argv[1])); b = json.load(open(sys.argv[2]))
assert a["prompt_ids"] == b["prompt_ids"] and a["ids"] == b["ids"], "differ"' "$T/ids.json" "$T/g0.json"
check "run --logits-out writes n_vocab f32, argmax = first greedy token" py '
raw = open(sys.argv[1], "rb").read(); assert len(raw) == 50257 * 4, "size %d" % len(raw)
x = struct.unpack("<50257f", raw); assert all(v == v and abs(v) < 1e30 for v in x), "not finite"
best = max(range(len(x)), key=lambda i: (x[i], -i))
g = json.load(open(sys.argv[2]))["results"][0]["generated_ids"][0]
assert best == g, "argmax %d, golden first token %d" % (best, g)' "$T/logits.f32" "$GOLD"
(cd "$T" && "$BIN" run --json --temp 0 -n 8 -p "$p0" >"$T/def.json" 2>"$T/def.err")
check "run without -m uses the bundled model" py '
a = json.load(open(sys.argv[1])); g = json.load(open(sys.argv[2]))["results"][0]
assert a["ids"] == g["generated_ids"][:8], a["ids"]' "$T/def.json" "$GOLD"

printf '%s' "$p0" >"$T/prompt.txt"
"$BIN" run -m "$MODEL" --json --temp 0 -n 8 -f "$T/prompt.txt" >"$T/file.json" 2>"$T/file.err"
check "run -f FILE = -p TEXT" py '
a = json.load(open(sys.argv[1])); b = json.load(open(sys.argv[2]))
assert a["prompt_ids"] == b["prompt_ids"] and a["ids"] == b["ids"][:8], "differ"' "$T/file.json" "$T/g0.json"

# ---- --chat: the model has no template, so ChatML as llama.cpp writes it ----
"$BIN" run -m "$MODEL" --json --temp 0 -n 4 --chat --system "Be brief." -p "Hi" >"$T/chat1.json" 2>"$T/chat1.err"
# (the newline after $(...) restores the one command substitution strips)
"$BIN" run -m "$MODEL" --json --temp 0 -n 4 -p "$(printf '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant')
" >"$T/chat2.json" 2>"$T/chat2.err"
check "run --chat renders ChatML (system, user, assistant prompt)" py '
a = json.load(open(sys.argv[1])); b = json.load(open(sys.argv[2]))
assert a["prompt_ids"] == b["prompt_ids"], "%s != %s" % (a["prompt_ids"], b["prompt_ids"])' "$T/chat1.json" "$T/chat2.json"

# ---- stop strings ----
# The stop string is cut out, and so is everything after it; reference: llama.cpp's text.
"$BIN" run -m "$MODEL" --json --temp 0 -n 64 -p "$p0" --stop "first time" >"$T/stop.json" 2>"$T/stop.err"
check "run --stop cuts the output before the stop string" py '
o = json.load(open(sys.argv[1])); g = json.load(open(sys.argv[2]))["results"][0]["generated_text"]
want = g[:g.index("first time")]
assert o["text"] == want, "%r != %r" % (o["text"], want)
assert o["stop_reason"] == "stop" and len(o["ids"]) < 64, o["stop_reason"]' "$T/stop.json" "$GOLD"
"$BIN" run -m "$MODEL" --temp 0 -n 64 -p "$p0" --stop "first time" --stop "zzzz" >"$T/stop.txt" 2>&1
check "run --stop in streamed text" py '
t = open(sys.argv[1], encoding="utf-8").read(); assert "first time" not in t and t == json.load(open(sys.argv[2]))["text"], repr(t)' "$T/stop.txt" "$T/stop.json"

# ---- sampling: seeds ----
"$BIN" run -m "$MODEL" --json -n 24 -p "$p0" --seed 7 >"$T/s1.json" 2>/dev/null
"$BIN" run -m "$MODEL" --json -n 24 -p "$p0" --seed 7 >"$T/s2.json" 2>/dev/null
"$BIN" run -m "$MODEL" --json -n 24 -p "$p0" --seed 8 >"$T/s3.json" 2>/dev/null
check "run same --seed, same tokens; another seed, other tokens" py '
a, b, c = (json.load(open(f))["ids"] for f in sys.argv[1:4])
assert a == b, "same seed differs"; assert a != c, "seeds 7 and 8 gave the same 24 tokens"' "$T/s1.json" "$T/s2.json" "$T/s3.json"

# ---- stats ----
"$BIN" run -m "$MODEL" --temp 0 -n 8 -p "$p0" --stats --stats-json "$T/st.json" >/dev/null 2>"$T/st.err"
check "run --stats-json has timings and peak_rss_bytes" py '
o = json.load(open(sys.argv[1]))
for k in ("prompt_tokens", "generated_tokens", "prompt_tps", "decode_tps", "ttft_s", "peak_rss_bytes"): assert k in o, k
assert o["peak_rss_bytes"] > 40 << 20, "peak RSS %d below the model size" % o["peak_rss_bytes"]' "$T/st.json"
check "run --stats prints speeds, TTFT, peak RSS and seed to stderr" py '
t = open(sys.argv[1]).read()
for w in ("prompt", "decode", "time to first token", "peak RSS", "seed"): assert w in t, w' "$T/st.err"

# ---- context ----
"$BIN" run -m "$MODEL" --json --temp 0 -n 600 --ignore-eos -c 48 -p "$p0" >"$T/ctx.json" 2>"$T/ctx.err"
# 48 positions hold the prompt and 38 generated tokens; the 39th is sampled from
# the last position's logits and needs no KV entry of its own.
check "run stops when the context is full" py '
o = json.load(open(sys.argv[1])); assert o["stop_reason"] == "ctx" and o["prompt_tokens"] + o["generated_tokens"] == 49, o' "$T/ctx.json"

# ---- chat over a pipe: two turns, the second reusing the KV cache ----
printf 'Hello there.\nTell me about the sea.\n' >"$T/chat.in"
"$BIN" chat -m "$MODEL" --temp 0 -n 16 --stats <"$T/chat.in" >"$T/chat.out" 2>"$T/chat.err"
rc=$?
"$BIN" chat -m "$MODEL" --temp 0 -n 16 --stats --no-cache <"$T/chat.in" >"$T/chat0.out" 2>"$T/chat0.err"
check "chat answers two piped turns, the second from the cached prefix" py '
rc = int(sys.argv[2]); err = open(sys.argv[1]).read()
assert rc == 0, "exit %d: %s" % (rc, err[:200])
turns = [l for l in err.splitlines() if "cached tokens reused" in l]
assert len(turns) == 2, "%d turns reported: %s" % (len(turns), err[:300])
assert turns[0].startswith("[0 cached"), turns[0]
reused = int(turns[1][1:].split()[0]); assert reused > 0, turns[1]' "$T/chat.err" "$rc"
check "chat with the KV cache = chat re-evaluating everything (greedy)" cmp "$T/chat.out" "$T/chat0.out"

# ---- errors: non-zero exit and a message naming the problem ----
err_case() { # NAME EXPECTED-WORD ARGS...
    name=$1 word=$2; shift 2
    "$BIN" "$@" >"$T/e.out" 2>"$T/e.err"
    rc=$?
    if [ $rc -ne 0 ] && grep -qi -- "$word" "$T/e.err"; then ok "$name"
    else notok "$name" "exit $rc, stderr: $(head -c 200 "$T/e.err")"; fi
}
err_case "run missing model file is an error" "nope.gguf" run -m "$T/nope.gguf" -p hi
err_case "run unknown flag is an error" "--frobnicate" run -m "$MODEL" -p hi --frobnicate
err_case "run prompt longer than -c is an error" "context" run -m "$MODEL" -c 8 -p "$(gold 2 prompt)"
long=$(printf 'the %.0s' $(seq 600))
err_case "run default context of the bundled model is 512" "context size of 512" run -m "$MODEL" -p "$long"
err_case "run without a prompt is an error" "prompt" run -m "$MODEL"
err_case "run --system without --chat is an error" "--chat" run -m "$MODEL" -p hi --system x
err_case "run bad --prompt-ids is an error" "prompt-ids" run -m "$MODEL" --prompt-ids 1,x,3
err_case "run out-of-range --prompt-ids is an error" "prompt-ids" run -m "$MODEL" --prompt-ids 50257
err_case "run non-GGUF model file is an error" "$GOLD" run -m "$GOLD" -p hi

[ $fails -eq 0 ]
