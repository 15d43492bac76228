#!/bin/sh
# Speculative decoding benchmark (issue 9; docs/DRAFT.md).  For the lead to
# run on a quiet machine; every figure is decode tokens/s summed over the
# prompts' timed decodes, with acceptance by depth and union expert bytes
# per accepted token from --stats-json.  The configurations of a set run
# side by side (each round runs every one, the order reversed every other
# round), and each row's "vs_<first>" is the median of the rounds' speed
# ratios against the set's first configuration: the figure to quote
# ("per_prompt": the same for each prompt alone, in the set's order).
#
#   bench/draft.sh [all|pair|ngram|more|synth|bound]
# env: THREADS (default 2), NGEN (tokens per prompt, default 128), REPS
#      (rounds over the prompts, default 5; tok/s is the median round's), OUT
#      (default build/bench/draft), SYNTH (the 17 GB model, default
#      /work/synth-models/q3a3b-q4k.gguf, made with sluice synth if absent),
#      SYNTH_MEM (default 6G)
#
# 1. pair:  tinymoe + tinydraft, 8 prompts x NGEN tokens, in RAM and streaming
#           with a cache of ~25% of the experts: no draft, --draft-max 1/2/4/8, adaptive.
#           Goals: adaptive never > 3% slower than no draft; in RAM >= 1.5x.
# 2. ngram: repetitive prompts (code, a list, a quoted passage), RAM and streaming:
#           no draft vs --draft ngram (adaptive).  Goal: >= 2x RAM, >= 1.5x streaming.
# 2b. more: 20 further prompts (bench/draft_prompts.txt: stories, dialogue, lists,
#           code, repeated quotes) in RAM: no draft, --draft ngram, --draft-max 4
#           (not part of "all").
# 3. synth: the Qwen3-30B-A3B-shaped synthetic model at --mem 6G: no draft, --draft ngram,
#           --draft random (garbage proposals, the economics must switch drafting off).
#           Goal: adaptive not measurably slower.
# 4. bound: what the best K policy could gain in RAM on the pair's and the
#           n-gram prompts' greedy continuations (build/draft_bound: an oracle
#           that knows how many drafts each step keeps; the 20 further
#           prompts too, n-gram only; not part of "all";
#           DUMP=PREFIX writes each step's times and kept counts to
#           PREFIX.ngram.jsonl and PREFIX.pair.jsonl and replays K policies
#           over them with bench/draft_policy.py).
set -u
cd "$(dirname "$0")/.." || exit 1
BIN=${SLUICE_BIN:-build/sluice}
THREADS=${THREADS:-2}
NGEN=${NGEN:-128}
REPS=${REPS:-5}
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

# draft_mem TARGET DRAFT: the bytes a run sets aside from --mem for the draft
# model (it says so on stderr), so a drafted streaming run keeps the same
# expert cache as the plain run it is compared with
draft_mem() {
    "$BIN" run -m "$1" --draft "$2" -n 1 -p x --mem 64G 2>&1 >/dev/null |
        sed -n 's/.*draft model: \([0-9.]*\) MiB of the memory budget.*/\1/p' |
        python3 -c "import sys; print(int(float(sys.stdin.read()) * 1048576) + 65536)"
}

# one_round LABEL MODEL PROMPTS R ARGS: round R of LABEL, one run per prompt line
one_round() {
    label=$1 model=$2 prompts=$3 r=$4; shift 4
    i=0
    printf '%s\n' "$prompts" | while IFS= read -r p; do
        i=$((i + 1))
        # the line's escapes expanded, trailing newlines kept ($(...) drops
        # them: the code prompt ends in one, the body of "def div" next)
        p=$(printf '%bx' "$p") f="$OUT/$label.$r.$i"
        p=${p%x}
        "$BIN" run -m "$model" -t "$THREADS" --temp 0 -n "$NGEN" --ignore-eos --no-heat -p "$p" --json \
            --stats-json "$f.stats.json" "$@" >"$f.out.json" 2>"$f.err" ||
            { echo "$label: round $r run $i failed: $(tail -1 "$f.err")"; }
    done
}

# runset MODEL PROMPTS CONFIG...: each CONFIG is "LABEL ARGS..." (ARGS split
# at spaces).  REPS rounds, each running every configuration once per prompt
# line, in the opposite order every other round: the host's speed drifts by
# more than the differences measured, so configurations run side by side and
# each row gives, besides its tok/s (the median round's), its speed against
# the first configuration as the median of the rounds' ratios
runset() {
    model=$1 prompts=$2; shift 2
    for c in "$@"; do rm -f "$OUT/${c%% *}".*.json; done
    fwd=$(for c in "$@"; do printf '%s\n' "$c"; done)
    rev=$(printf '%s\n' "$fwd" | awk '{ l[NR] = $0 } END { for (i = NR; i > 0; i--) print l[i] }')
    r=0
    while [ $r -lt "$REPS" ]; do
        r=$((r + 1)) order=$fwd
        [ $((r % 2)) = 0 ] && order=$rev
        printf '%s\n' "$order" | while IFS= read -r c; do
            args=${c#* }
            [ "$args" = "$c" ] && args=""
            # shellcheck disable=SC2086
            one_round "${c%% *}" "$model" "$prompts" "$r" $args
        done
    done
    labels=$(for c in "$@"; do printf '%s ' "${c%% *}"; done)
    # shellcheck disable=SC2086
    python3 - "$OUT" "$REPS" $labels <<'PY'
import glob, json, statistics, sys
out, reps, labels = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def rounds(label):
    """Per round: decoded tokens and seconds over the prompts."""
    res = []
    for r in range(1, reps + 1):
        toks = secs = 0
        for f in sorted(glob.glob(f"{out}/{label}.{r}.*.stats.json")):
            s = json.load(open(f))
            toks += s["decode_steps"]; secs += s["decode_s"]
        res.append((toks, secs))
    return res
def per_prompt(label):
    """Per prompt: the median over the rounds of its decode speed against the first configuration's."""
    res = []
    for i in range(1, len(glob.glob(f"{out}/{label}.1.*.stats.json")) + 1):
        r = []
        for k in range(1, reps + 1):
            try:
                a, b = (json.load(open(f"{out}/{x}.{k}.{i}.stats.json")) for x in (labels[0], label))
            except (OSError, ValueError):
                continue
            if a["decode_s"] and b["decode_s"] and a["decode_steps"]:
                r.append((b["decode_steps"] / b["decode_s"]) / (a["decode_steps"] / a["decode_s"]))
        res.append(round(statistics.median(r), 3) if r else None)
    return res
base = rounds(labels[0])
for label in labels:
    rs = rounds(label)
    rates = [t / s for t, s in rs if s]
    ratios = [(t / s) / (bt / bs) for (t, s), (bt, bs) in zip(rs, base) if s and bs and bt]
    prop = acc = 0; ub = 0.0; depth = {}; kh = {}; n_runs = 0; pred = meas = mae = 0.0; ids = []
    for f in sorted(glob.glob(f"{out}/{label}.1.*.stats.json")):
        d = json.load(open(f)).get("draft")
        if not d: continue
        prop += d["proposed"]; acc += d["accepted"]; n_runs += 1
        ub += d["union_expert_bytes_per_accepted_token"] or 0
        pred += d.get("verify_predicted_s", 0); meas += d.get("verify_priced_s", d["verify_s"]); mae += d.get("verify_cost_mae_s", 0)
        for i, a in enumerate(d["acceptance_by_depth"]): depth.setdefault(i, []).append(a)
        for i, k in enumerate(d["k_hist"]): kh[i] = kh.get(i, 0) + k
    for f in sorted(glob.glob(f"{out}/{label}.1.*.out.json")): ids.append(json.load(open(f))["ids"])
    row = {"label": label, "tok_s": statistics.median(rates) if rates else 0, "rounds": [round(x, 1) for x in rates],
           "vs_" + labels[0]: round(statistics.median(ratios), 3) if ratios else None,
           "round_ratios": sorted(round(x, 3) for x in ratios),
           "per_prompt": per_prompt(label),
           "tokens": rs[-1][0], "acceptance": acc / prop if prop else None,
           "acceptance_by_depth": [round(sum(v) / len(v), 3) for _, v in sorted(depth.items())],
           "k_hist": [kh[i] for i in sorted(kh)],
           "union_expert_MB_per_accepted_token": ub / max(1, n_runs) / 1e6 if prop else None,
           # the verify cost model (draft_cost.h): predicted / measured seconds, mean error per verification
           "verify_predicted_over_measured": round(pred / meas, 3) if meas else None,
           "verify_cost_mae_ms": round(mae / max(1, n_runs) * 1e3, 4) if prop else None}
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
    M25D=$((M25 + $(draft_mem "$TARGET" "$DRAFT")))
    for where in ram stream; do
        extra="" dextra=""
        [ $where = stream ] && extra="--mem $M25" dextra="--mem $M25D"
        echo "== tinymoe + tinydraft, $where ${extra:+($extra, ~25% of the experts cached)}, $THREADS threads, 8 x $NGEN tokens"
        runset "$TARGET" "$PAIR_PROMPTS" "pair-$where-none $extra" \
            "pair-$where-k1 $dextra --draft $DRAFT --draft-max 1" "pair-$where-k2 $dextra --draft $DRAFT --draft-max 2" \
            "pair-$where-k4 $dextra --draft $DRAFT --draft-max 4" "pair-$where-k8 $dextra --draft $DRAFT --draft-max 8" \
            "pair-$where-adaptive $dextra --draft $DRAFT" "pair-$where-ngram $extra --draft ngram"
        for k in k1 k2 k4 k8 adaptive ngram; do same "pair-$where-$k" "pair-$where-none"; done
    done
fi

if [ "$WHAT" = all ] || [ "$WHAT" = ngram ]; then
    M25=$(budget "$TARGET" 0.25)
    for where in ram stream; do
        extra=""
        [ $where = stream ] && extra="--mem $M25"
        echo "== n-gram drafting on repetitive prompts, tinymoe, $where"
        runset "$TARGET" "$NGRAM_PROMPTS" "ngram-$where-none $extra" "ngram-$where-adaptive $extra --draft ngram" \
            "ngram-$where-k4 $extra --draft ngram --draft-max 4"
        same "ngram-$where-adaptive" "ngram-$where-none"
        same "ngram-$where-k4" "ngram-$where-none"
    done
fi

MORE_PROMPTS=$(cat bench/draft_prompts.txt)

if [ "$WHAT" = more ]; then
    echo "== n-gram drafting on 20 further prompts, tinymoe in RAM"
    runset "$TARGET" "$MORE_PROMPTS" "more-none" "more-adaptive --draft ngram" "more-k4 --draft ngram --draft-max 4"
    same "more-adaptive" "more-none"
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
    runset "$SYNTH" "$PAIR_PROMPTS" "synth-none --mem $SYNTH_MEM" "synth-ngram --mem $SYNTH_MEM --draft ngram" \
        "synth-random --mem $SYNTH_MEM --draft random"
    same synth-ngram synth-none
    same synth-random synth-none
    NGEN=$NGEN_SAVE
fi

if [ "$WHAT" = bound ]; then
    make -s build/draft_bound || exit 1
    # seqs PROMPTS: "P id id ..." per prompt, the prompt's ids then its greedy continuation
    seqs() {
        printf '%s\n' "$1" | while IFS= read -r p; do
            p=$(printf '%bx' "$p")
            p=${p%x}
            "$BIN" run -m "$TARGET" -t 1 --temp 0 -n "$NGEN" --ignore-eos --no-heat -p "$p" --json 2>/dev/null |
                python3 -c "import json, sys; o = json.load(sys.stdin); print(len(o['prompt_ids']), *o['prompt_ids'], *o['ids'])"
        done
    }
    # bound SET PROMPTS ARGS: the tool over the set's texts; with DUMP, the
    # policy replay over its dump too (bench/draft_policy.py)
    bound() {
        which=$1 prompts=$2; shift 2
        seqs "$prompts" >"$OUT/bound.$which.seqs" || return 1
        build/draft_bound "$TARGET" "$@" -t "$THREADS" -r "${BOUND_REPS:-3}" ${DUMP:+--dump "$DUMP.$which.jsonl"} \
            <"$OUT/bound.$which.seqs" || return 1
        [ -z "${DUMP:-}" ] || python3 bench/draft_policy.py "$DUMP.$which.jsonl" "$OUT/bound.$which.seqs"
    }
    echo "== bound: n-gram prompts, tinymoe in RAM, $THREADS threads, $NGEN tokens each"
    bound ngram "$NGRAM_PROMPTS"
    echo "== bound: story prompts, tinymoe + tinydraft in RAM, $THREADS threads, $NGEN tokens each"
    bound pair "$PAIR_PROMPTS" --draft "$DRAFT"
    echo "== bound: 20 further prompts, tinymoe in RAM, $THREADS threads, $NGEN tokens each"
    bound more "$MORE_PROMPTS"
fi
