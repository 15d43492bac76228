#!/bin/sh
# Speculative decoding benchmark (issue 9; docs/DRAFT.md).  For the lead to
# run on a quiet machine; every figure is decode tokens/s summed over the
# prompts' timed decodes, with acceptance by depth and union expert bytes
# per accepted token from --stats-json.
#
#   bench/draft.sh [all|pair|ngram|synth]
# env: THREADS (default 2), NGEN (tokens per prompt, default 128), OUT
#      (default build/bench/draft), SYNTH (the 17 GB model, default
#      /work/synth-models/q3a3b-q4k.gguf, made with sluice synth if absent),
#      SYNTH_MEM (default 6G)
#
# 1. pair:  tinymoe + tinydraft, 8 prompts x NGEN tokens, in RAM and streaming
#           with a cache of ~25% of the experts: no draft, --draft-max 1/2/4/8, adaptive.
#           Goals: adaptive never > 3% slower than no draft; in RAM >= 1.5x.
# 2. ngram: repetitive prompts (code, a list, a quoted passage), RAM and streaming:
#           no draft vs --draft ngram (adaptive).  Goal: >= 2x RAM, >= 1.5x streaming.
# 3. synth: the Qwen3-30B-A3B-shaped synthetic model at --mem 6G: no draft, --draft ngram,
#           --draft random (garbage proposals, the economics must switch drafting off).
#           Goal: adaptive not measurably slower.
set -u
cd "$(dirname "$0")/.."
BIN=${SLUICE_BIN:-build/sluice}
THREADS=${THREADS:-2}
NGEN=${NGEN:-128}
OUT=${OUT:-build/bench/draft}
SYNTH=${SYNTH:-/work/synth-models/q3a3b-q4k.gguf}
SYNTH_MEM=${SYNTH_MEM:-6G}
WHAT=${1:-all}
TARGET=models/tinymoe-q8_0.gguf
DRAFT=models/tinydraft-f16.gguf
mkdir -p "$OUT"

PAIR_PROMPTS="It was a dark and stormy night, and
The old man looked at the sea and said
Once upon a time there lived a king who had three daughters.
In the morning, the children went down to the river
\"I do not know what you mean,\" said she,
The history of the world is
She opened the letter slowly, and read
When the ship came into the harbour, the sailors"

NGRAM_PROMPTS="def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n    return a * b\n\ndef div(a, b):\n
1. apples\n2. pears\n3. plums\n4. cherries\n5. apples\n6. pears\n7. plums\n8.
He said: \"The quick brown fox jumps over the lazy dog, and the lazy dog sleeps in the sun.\" Then he said it again: \"The quick brown fox"

# budget MODEL SHARE: a --mem whose cache holds SHARE of the model's experts
budget() {
    "$BIN" inspect "$1" --json --mem 64G 2>/dev/null | python3 -c "
import json, sys
p = json.load(sys.stdin)['memory_plan']
print(p['total'] - p['cache'] - p['unused'] + int(p['experts'] * float(sys.argv[1])) * p['slot_bytes'])" "$2"
}

# runset LABEL MODEL PROMPTS -- ARGS: one run per prompt line; prints one summary row
runset() {
    label=$1 model=$2 prompts=$3; shift 3
    i=0
    rm -f "$OUT/$label".*.json
    printf '%s\n' "$prompts" | while IFS= read -r p; do
        i=$((i + 1))
        p=$(printf '%b' "$p")
        "$BIN" run -m "$model" -t "$THREADS" --temp 0 -n "$NGEN" --ignore-eos --no-heat -p "$p" --json \
            --stats-json "$OUT/$label.$i.stats.json" "$@" >"$OUT/$label.$i.json" 2>"$OUT/$label.$i.err" ||
            { echo "$label: run $i failed: $(tail -1 "$OUT/$label.$i.err")"; }
    done
    python3 - "$OUT" "$label" <<'PY'
import glob, json, sys
out, label = sys.argv[1], sys.argv[2]
toks = secs = prop = acc = 0
ub = 0.0; depth = {}; kh = {}; ids = []
for f in sorted(glob.glob(f"{out}/{label}.*.stats.json")):
    s = json.load(open(f))
    n = s["decode_steps"]; toks += n; secs += s["decode_s"]
    d = s.get("draft")
    if d:
        prop += d["proposed"]; acc += d["accepted"]
        ub += d["union_expert_bytes_per_accepted_token"] or 0
        for i, a in enumerate(d["acceptance_by_depth"]): depth.setdefault(i, []).append(a)
        for i, k in enumerate(d["k_hist"]): kh[i] = kh.get(i, 0) + k
for f in sorted(glob.glob(f"{out}/{label}.*.json")):
    if not f.endswith(".stats.json"): ids.append(json.load(open(f))["ids"])
n_files = max(1, len(ids))
row = {"label": label, "tok_s": toks / secs if secs else 0, "tokens": toks, "acceptance": acc / prop if prop else None,
       "acceptance_by_depth": [round(sum(v) / len(v), 3) for _, v in sorted(depth.items())],
       "k_hist": [kh[i] for i in sorted(kh)], "union_expert_MB_per_accepted_token": ub / n_files / 1e6 if prop else None}
json.dump({"row": row, "ids": ids}, open(f"{out}/{label}.summary.json", "w"))
print(json.dumps(row))
PY
}

# same LABEL REF: the drafted run's ids equal the plain run's (exactness, again)
same() {
    python3 -c "
import json, sys
a = json.load(open(sys.argv[1]))['ids']; b = json.load(open(sys.argv[2]))['ids']
print('  ids identical to %s: %s' % (sys.argv[3], a == b))" "$OUT/$1.summary.json" "$OUT/$2.summary.json" "$2"
}

if [ "$WHAT" = all ] || [ "$WHAT" = pair ]; then
    M25=$(budget "$TARGET" 0.25)
    for where in ram stream; do
        extra=""
        [ $where = stream ] && extra="--mem $M25"
        echo "== tinymoe + tinydraft, $where ${extra:+($extra, ~25% of the experts cached)}, $THREADS threads, 8 x $NGEN tokens"
        # shellcheck disable=SC2086
        runset "pair-$where-none" "$TARGET" "$PAIR_PROMPTS" $extra
        for k in 1 2 4 8; do
            # shellcheck disable=SC2086
            runset "pair-$where-k$k" "$TARGET" "$PAIR_PROMPTS" $extra --draft "$DRAFT" --draft-max $k
            same "pair-$where-k$k" "pair-$where-none"
        done
        # shellcheck disable=SC2086
        runset "pair-$where-adaptive" "$TARGET" "$PAIR_PROMPTS" $extra --draft "$DRAFT"
        same "pair-$where-adaptive" "pair-$where-none"
        # shellcheck disable=SC2086
        runset "pair-$where-ngram" "$TARGET" "$PAIR_PROMPTS" $extra --draft ngram
    done
fi

if [ "$WHAT" = all ] || [ "$WHAT" = ngram ]; then
    M25=$(budget "$TARGET" 0.25)
    for where in ram stream; do
        extra=""
        [ $where = stream ] && extra="--mem $M25"
        echo "== n-gram drafting on repetitive prompts, tinymoe, $where"
        # shellcheck disable=SC2086
        runset "ngram-$where-none" "$TARGET" "$NGRAM_PROMPTS" $extra
        # shellcheck disable=SC2086
        runset "ngram-$where-adaptive" "$TARGET" "$NGRAM_PROMPTS" $extra --draft ngram
        same "ngram-$where-adaptive" "ngram-$where-none"
        # shellcheck disable=SC2086
        runset "ngram-$where-k4" "$TARGET" "$NGRAM_PROMPTS" $extra --draft ngram --draft-max 4
    done
fi

if [ "$WHAT" = all ] || [ "$WHAT" = synth ]; then
    if [ ! -f "$SYNTH" ]; then
        echo "== $SYNTH not found: writing a Qwen3-30B-A3B-shaped Q4_K model with sluice synth"
        mkdir -p "$(dirname "$SYNTH")"
        "$BIN" synth --like qwen3-30b-a3b --type Q4_K -o "$SYNTH" || exit 1
    fi
    NGEN_SAVE=$NGEN
    NGEN=${SYNTH_NGEN:-32}
    echo "== synthetic qwen3-30b-a3b streaming at --mem $SYNTH_MEM, $NGEN tokens per prompt"
    runset "synth-none" "$SYNTH" "$PAIR_PROMPTS" --mem "$SYNTH_MEM"
    runset "synth-ngram" "$SYNTH" "$PAIR_PROMPTS" --mem "$SYNTH_MEM" --draft ngram
    same synth-ngram synth-none
    runset "synth-random" "$SYNTH" "$PAIR_PROMPTS" --mem "$SYNTH_MEM" --draft random
    same synth-random synth-none
    NGEN=$NGEN_SAVE
fi
