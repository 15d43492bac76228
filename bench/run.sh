#!/bin/sh
# `make bench`: throughput of sluice on the bundled model and on any larger
# models you point it at, then a one-line-per-run summary.
#
#   sh bench/run.sh [MODEL.gguf ...]
#   SLUICE_BENCH_MODELS="a.gguf b.gguf"   more models (space-separated)
#   SLUICE_BENCH_THREADS=1,2              thread counts (default: 1 and the physical cores)
#   SLUICE_BENCH_ARGS="-p 512 -n 128 -r 5"  passed to `sluice bench`
#   SLUICE_BENCH_SYNTH=1                  also bench a synthetic model made by `sluice synth`
#   SLUICE_SYNTH_ARGS="--like qwen3-30b-a3b --layers 12"   its shape (default shown; docs/SYNTH.md)
#   SLUICE_BIN=build/sluice               the binary
#
# Results (one JSON object per model) go to $SLUICE_BENCH_OUT (default
# build/bench/), the table to stdout.  The machine is shared: compare numbers
# taken in one run, and look at the spread column.
set -u
BIN=${SLUICE_BIN:-build/sluice}
OUT=${SLUICE_BENCH_OUT:-build/bench}
ARGS=${SLUICE_BENCH_ARGS:--p 512 -n 128 -r 5}
[ -x "$BIN" ] || { echo "bench: $BIN not built (run make)" >&2; exit 1; }
# physical cores (sluice bench defaults to those too); logical CPUs if lscpu is missing
cores=$(lscpu -p=Core,Socket 2>/dev/null | grep -v "^#" | sort -u | wc -l)
[ "${cores:-0}" -gt 0 ] || cores=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
THREADS=${SLUICE_BENCH_THREADS:-$( [ "$cores" -gt 1 ] && echo "1,$cores" || echo 1 )}
mkdir -p "$OUT"

models="models/tinymoe-q8_0.gguf $* ${SLUICE_BENCH_MODELS:-}"
if [ "${SLUICE_BENCH_SYNTH:-0}" = 1 ]; then
    # A larger MoE with the shape of a real one, generated locally (never
    # committed); 12 of Qwen3-30B-A3B's 48 layers are 4.6 GB at Q4_K.
    synth="$OUT/synth.gguf"
    [ -f "$synth" ] || "$BIN" synth ${SLUICE_SYNTH_ARGS:---like qwen3-30b-a3b --layers 12} -o "$synth" || exit 1
    models="$models $synth"
fi

status=0
summary=""
for m in $models; do
    if [ ! -f "$m" ]; then
        echo "bench: $m not found, skipped" >&2
        continue
    fi
    name=$(basename "$m" .gguf)
    echo "== $m (threads $THREADS)"
    # shellcheck disable=SC2086
    if ! "$BIN" bench -m "$m" -t "$THREADS" $ARGS --json-out "$OUT/$name.json"; then status=1; continue; fi
    line=$(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
print("  ".join("t=%d pp %s tg %s" % (r["threads"],
      "%.1f" % r["pp_tps"] if r["pp_tps"] is not None else "-",
      "%.1f" % r["tg_tps"] if r["tg_tps"] is not None else "-") for r in d["results"]))
' "$OUT/$name.json" 2>/dev/null || echo "(see $OUT/$name.json)")
    summary="$summary$(printf '%-28s %s' "$name" "$line")
"
    echo
done
echo "summary (median tokens/s; JSON in $OUT/):"
printf '%s' "$summary"
exit $status
