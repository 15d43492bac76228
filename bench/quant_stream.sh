#!/bin/sh
# Issue 12's streaming comparison: a Qwen3-30B-A3B-shaped model with IQ2_XXS
# routed experts (spine q4_K, about 7.5 GB) against the same shape in Q4_K
# (about 17 GB), both streamed under one --mem budget, by default a third of
# the IQ2_XXS file.  `sluice bench --mem` prints, per test, expert bytes per
# token, hit rate, achieved / raw disk bandwidth and tokens/s against the I/O
# bound (disk GB/s / bytes per token); bytes per token should fall by about
# the bits-per-weight ratio (2.06 / 4.5) and tokens/s rise with it.
#
#   sh bench/quant_stream.sh [DIR]        (default /work/big/quant; models are
#                                          written there with sluice synth if absent)
# env: MEM (budget, default a third of the IQ2_XXS file), THREADS (default 2),
#      NGEN (decode tokens, default 32), NPP (prompt tokens, default 64),
#      THROTTLE (e.g. 1G: reads capped through a blkio cgroup when root, so
#      the I/O bound is a known rate / bytes per token)
# Run on a quiet machine; results in build/bench/quant/stream-*.json.
set -u
cd "$(dirname "$0")/.."
BIN=${SLUICE_BIN:-build/sluice}
DIR=${1:-/work/big/quant}
THREADS=${THREADS:-2}
NGEN=${NGEN:-32}
NPP=${NPP:-64}
THR=""
[ -n "${THROTTLE:-}" ] && THR="--throttle $THROTTLE"
OUT=build/bench/quant
mkdir -p "$DIR" "$OUT"
make -j2 build/sluice >/dev/null || exit 1

for t in iq2_xxs q4_K; do
    M="$DIR/q3a3b-$t.gguf"
    if [ ! -f "$M" ]; then
        echo "== writing $M"
        "$BIN" synth --like qwen3-30b-a3b --type "$t" --route-skew 1 -o "$M" || exit 1
    fi
done
IQ="$DIR/q3a3b-iq2_xxs.gguf"
MEM=${MEM:-$(( $(stat -c %s "$IQ") / 3 ))}
echo "== budget --mem $MEM bytes ($(( MEM >> 20 )) MiB), $THREADS threads, pp$NPP tg$NGEN${THROTTLE:+, reads capped at $THROTTLE/s}"
for t in iq2_xxs q4_K; do
    M="$DIR/q3a3b-$t.gguf"
    echo "== $t: $M ($(du -h "$M" | cut -f1))"
    "$BIN" inspect "$M" --mem "$MEM" -t "$THREADS" | sed -n '/memory plan/,$p'
    "$BIN" bench -m "$M" --mem "$MEM" -p "$NPP" -n "$NGEN" -r 1 -t "$THREADS" $THR --json-out "$OUT/stream-$t.json" 2>&1 |
        grep -v '^$'
done
echo "== results: $OUT/stream-iq2_xxs.json, $OUT/stream-q4_K.json"
