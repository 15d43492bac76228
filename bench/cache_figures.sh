#!/bin/sh
# Issue 15's figures on the 17 GB Qwen3-30B-A3B-shaped synthetic model, for
# a quiet machine (the lead's run; take no figures while others load it):
#   1. throttled decode at 1.0 and 0.5 GB/s, --mem = file/3 and file/6:
#      tok/s against rate / bytes per token, bytes against the offline
#      optimum, prefetch waste, disk busy; a timeline picture per setting;
#   2. unthrottled decode at file/3 (no slower than before: compare with
#      SLUICE_BIN_OLD if given);
#   3. prefill of 600 tokens at file/3 and file/6 throttled to 1.0 GB/s,
#      against max(in-RAM prefill, expert bytes / rate);
#   4. live routing traces (run --trace-out) at file/3 and file/6 and the
#      replay tables (misses / Belady's at 10-50% of the experts).
#   sh bench/cache_figures.sh            (root: blkio throttling; else the store's simulated drive)
#   MODEL=/work/big/q30b-q4k.gguf OUT=build/cache-figures NGEN=32 REPS=3
# Synthetic models: random weights, uniform expert popularity (synth default
# --route-skew 0), and greedy decoding falls into loops, so the routing
# repeats; real models route with more skew and less repetition.
set -u
BIN=${SLUICE_BIN:-build/sluice}
MODEL=${MODEL:-/work/big/q30b-q4k.gguf}
OUT=${OUT:-build/cache-figures}
NGEN=${NGEN:-32}
REPS=${REPS:-3}
T=${THREADS:-2}
mkdir -p "$OUT"
[ -f "$MODEL" ] || { echo "no $MODEL: sluice synth --like qwen3-30b-a3b --type Q4_K -o $MODEL" >&2; exit 1; }
size=$(stat -c %s "$MODEL")
m3=$((size / 3)) m6=$((size / 6))
drop() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true; }

echo "== 1. throttled decode (tg$NGEN x $REPS texts, warmed on another text)"
for mem in $m3 $m6; do
    for rate in 1G 500M; do
        tag="mem$((mem / 1000000))M-$rate"
        drop
        "$BIN" bench -m "$MODEL" --mem "$mem" -p 0 -n "$NGEN" -r "$REPS" -t "$T" --no-probe --throttle "$rate" \
            --timeline "$OUT/timeline-$tag.svg" --json-out "$OUT/decode-$tag.json" | tee "$OUT/decode-$tag.txt" |
            grep -E "^\| +[0-9]+ \| tg|throttled to|tg$NGEN:"
    done
done

echo "== 2. unthrottled decode at file/3"
for b in "$BIN" ${SLUICE_BIN_OLD:-}; do
    drop
    "$b" bench -m "$MODEL" --mem "$m3" -p 0 -n "$NGEN" -r "$REPS" -t "$T" --json-out "$OUT/decode-free-$(basename "$b").json" |
        grep -E "^\| .*tg|I/O bound"
done

echo "== 3. prefill, 600 tokens"
"$BIN" bench -m "$MODEL" -p 600 -n 0 -r 1 -t "$T" --json-out "$OUT/prefill-ram.json" | grep -E "pp600"
for mem in $m3 $m6; do
    drop
    "$BIN" bench -m "$MODEL" --mem "$mem" -p 600 -n 0 -r 1 -t "$T" --no-probe --throttle 1G \
        --json-out "$OUT/prefill-$((mem / 1000000))M.json" | grep -E "pp600"
done
python3 - "$OUT" <<'PY'
import json, sys, glob
out = sys.argv[1]
ram = json.load(open(out + "/prefill-ram.json"))["pp_tps"]
for f in sorted(glob.glob(out + "/prefill-*M.json")):
    j = json.load(open(f)); s = j["streaming"]["per_threads"][0]["pp"]
    t = 600 / j["pp_tps"]; t_ram = 600 / ram; t_io = s["expert_bytes_per_token"] * 600 / 1e9
    print("%s: %.1f s; in RAM %.1f s, expert bytes / 1 GB/s %.1f s: %.0f%% of max" % (f, t, t_ram, t_io, 100 * max(t_ram, t_io) / t))
PY

echo "== 4. live traces and replay"
for mem in $m3 $m6; do
    drop
    "$BIN" run -m "$MODEL" --mem "$mem" -t "$T" --temp 0 -n 64 --no-heat \
        -p "The ferry left the harbour a little after six, when the fog was still lying on the water." \
        --trace-out "$OUT/trace-$((mem / 1000000))M.json" --stats-json "$OUT/run-$((mem / 1000000))M.stats" >/dev/null
done
sh bench/replay.sh "${SLUICE_SHARED:-../shared}/traces/tinymoe-valid-routes.json" "$OUT"/trace-*.json
for tr in "${SLUICE_SHARED:-../shared}/traces/tinymoe-valid-routes.json" "$OUT"/trace-*.json; do
    python3 bench/replay_bounds.py "$tr"
done
