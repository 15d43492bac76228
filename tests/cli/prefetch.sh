#!/bin/sh
# `sluice run --prefetch off|next|auto` on the bundled model: the router
# always decides, so every mode gives llama.cpp's greedy continuation and the
# same prompt logits, with experts in RAM and streamed through a small cache
# (--mem with 12 expert slots); --stats-json carries the "prefetch" object
# (recall / precision fractions, per-layer entries) whenever prediction is on,
# and the store's prefetch figures when streaming.  Prints ok / not ok / skip
# lines like the C tests.  JSON is read with python3.
. "$(dirname "$0")/../cli_lib.sh"
GOLD=tests/fixtures/tinymoe-q8_0-greedy.json
need_python "cli prefetch tests"

py() { code=$1; shift; python3 -c "import json, sys
$code" "$@"; }

PROMPT=$(py 'print(json.load(open(sys.argv[1]))["results"][1]["prompt"])' "$GOLD")
# a --mem whose expert cache holds 12 experts (two layers' worth of decode)
MEM=$("$BIN" inspect "$MODEL" --json --mem 4G 2>/dev/null | py '
p = json.load(sys.stdin)["memory_plan"]
print(p["total"] - p["cache"] - p["unused"] + 12 * p["slot_bytes"])')

for place in ram stream; do
    extra=""
    [ "$place" = stream ] && extra="--mem $MEM --no-heat"
    for mode in off next auto; do
        # shellcheck disable=SC2086
        "$BIN" run -m "$MODEL" --json --temp 0 -n 64 -p "$PROMPT" --prefetch $mode $extra \
            --logits-out "$T/$place-$mode.logits" --stats-json "$T/$place-$mode.stats" \
            >"$T/$place-$mode.json" 2>"$T/$place-$mode.err"
        name="run --prefetch $mode ($place): greedy = llama.cpp golden, logits = in-RAM off"
        if [ ! -s "$T/$place-$mode.json" ]; then
            notok "$name" "$(head -c 300 "$T/$place-$mode.err")"
            continue
        fi
        if ! cmp -s "$T/ram-off.logits" "$T/$place-$mode.logits"; then
            notok "$name" "prompt logits differ"
            continue
        fi
        if py 'o = json.load(open(sys.argv[1])); g = json.load(open(sys.argv[2]))["results"][1]
assert o["ids"] == g["generated_ids"], "ids differ: %s" % o["ids"][:20]' "$T/$place-$mode.json" "$GOLD" \
            >"$T/why" 2>&1; then ok "$name"; else notok "$name" "$(tail -1 "$T/why")"; fi
    done
done

check() { # NAME FILE MODE PLACE
    if py '
o = json.load(open(sys.argv[1])); mode, place = sys.argv[2], sys.argv[3]
if mode == "off":
    assert "prefetch" not in o, "a prefetch object with prediction off"
    sys.exit(0)
p = o["prefetch"]
assert p["mode"] == mode, p["mode"]
assert p["steps"] == o["decode_steps"] > 0, "steps %d, decode_steps %d" % (p["steps"], o["decode_steps"])
for k in ("recall", "precision"):
    assert isinstance(p[k], float) and 0.0 < p[k] <= 1.0, "%s = %r" % (k, p[k])
L = p["per_layer"]
assert [l["layer"] for l in L] == list(range(6)), [l["layer"] for l in L]
for l in L:
    assert 0.0 <= l["recall"] <= 1.0 and 0.0 <= l["precision"] <= 1.0 and l["steps"] == p["steps"], l
    assert set(l["predictor_recall"]) == {"attn", "out", "prev", "token"}, l["predictor_recall"]
# every layer routes the same number of experts per step: the total is the mean
assert abs(p["recall"] - sum(l["recall"] for l in L) / len(L)) < 1e-9, "recall is not the layers mean"
assert isinstance(p["wasted_bytes"], int) and isinstance(p["used"], int)
if place == "ram":
    assert p["used"] == 0 and p["wasted_bytes"] == 0, "store figures without a store"
else:
    assert p["used"] > 0, "the store used no prefetched expert"
' "$2" "$3" "$4" >"$T/why" 2>&1; then ok "$1"; else notok "$1" "$(tail -1 "$T/why")"; fi
}

for place in ram stream; do
    for mode in off next auto; do
        [ -s "$T/$place-$mode.stats" ] || continue
        check "run --stats-json prefetch object ($mode, $place)" "$T/$place-$mode.stats" "$mode" "$place"
    done
done

# the --stats lines (prediction runs in RAM too when asked for)
"$BIN" run -m "$MODEL" --temp 0 -n 16 -p "$PROMPT" --stats --prefetch auto >/dev/null 2>"$T/stats.txt"
if grep -q "^expert prediction .*recall.*precision.*(auto)" "$T/stats.txt" && grep -q "per layer recall" "$T/stats.txt"
then ok "run --stats prints the expert prediction lines"
else notok "run --stats prints the expert prediction lines" "$(tail -3 "$T/stats.txt" | tr '\n' ' ')"; fi

# a bad mode is refused
"$BIN" run -m "$MODEL" -n 1 -p x --prefetch sometimes >/dev/null 2>"$T/bad.err"
rc=$?
if [ $rc -eq 2 ] && grep -q "prefetch.*auto, next or off" "$T/bad.err"; then ok "run --prefetch with a bad mode is an error"
else notok "run --prefetch with a bad mode is an error" "exit $rc: $(head -c 200 "$T/bad.err")"; fi

[ "$fails" -eq 0 ]
