#!/bin/sh
# Issue 15's figures, for a quiet machine (the lead's run; take no figures
# while others load it).
#   sh bench/cache_figures.sh tiny    only section 0 (tinymoe, a few minutes)
#   sh bench/cache_figures.sh big     only sections 1-4 (the 17 GB model)
#   sh bench/cache_figures.sh         both
#   0. prefetch admission, before / after, on the bundled tinymoe at 30% of
#      its experts: the store's simulated drive at 100 / 30 / 3 MB/s and
#      unthrottled (the compute-bound regime, where the rule must keep the
#      prefetch), for --prefetch-admit cost (the rule), rank (before), off
#      (every guess) and --prefetch off: prefetch waste, bytes per token,
#      tok/s against the ceiling rate / bytes per token, demand reads that
#      found a prefetch at the device.  As root also the 17 GB model at
#      1.0 / 0.5 GB/s through blkio, cost against rank.
# Sections 1-4 are on the 17 GB Qwen3-30B-A3B-shaped synthetic model:
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
WHAT=${1:-all}
TINY=${TINY:-models/tinymoe-q8_0.gguf}
mkdir -p "$OUT"
drop() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true; }

# Section 0's table from bench --json-out files: label=file pairs.
admit_table() {
    python3 - "$@" <<'PY'
import json, sys
print("| setting | cached | prefetch waste | bytes/token | tok/s | ceiling | of ceiling | demand reads behind prefetch |")
print("|---|---|---|---|---|---|---|---|")
for arg in sys.argv[1:]:
    label, path = arg.split("=", 1)
    try:
        j = json.load(open(path))
    except (OSError, ValueError) as e:
        print("| %s | (no result: %s) |" % (label, e)); continue
    s = j["streaming"]; tg = s["per_threads"][0]["tg"]; tps = j["tg_tps"] or 0
    bpt = tg["expert_bytes_per_token"]; rate = s["throttle_bps"]
    ceil = rate / bpt if rate and bpt else 0
    share = "%.0f%%" % (100 * tps / ceil) if ceil else "-"
    print("| %s | %d/%d | %.1f%% | %.2f MiB | %.2f | %s | %s | %d of %d |" % (
        label, s["experts_cached"], s["experts"], 100 * tg["prefetch_waste_share"], bpt / 2**20, tps,
        "%.2f" % ceil if ceil else "-", share, tg["demand_behind_prefetch"], tg["demand_reads"]))
PY
}

if [ "$WHAT" != big ]; then
    echo "== 0. prefetch admission on $TINY at 30% of the experts (tg${TNGEN:-64} x ${TREPS:-3} texts; tg16 at 3 MB/s)"
    # the budget that leaves 30% of the experts cached, planned as bench
    # plans it (context = N + 128 tokens, -t threads)
    tiny_mem() {
        "$BIN" inspect "$TINY" --json --mem 4G -c $(($1 + 128)) -t "$T" 2>/dev/null | python3 -c '
import json, sys
p = json.load(sys.stdin)["memory_plan"]
print(p["total"] - p["cache"] - p["unused"] + round(0.3 * p["experts"]) * p["slot_bytes"])'
    }
    for rate in 100M 30M 3M free; do
        args=""
        for cfg in "cost:--prefetch-admit cost" "rank:--prefetch-admit rank" "off:--prefetch-admit off" \
                   "noprefetch:--prefetch off"; do
            label=${cfg%%:*} flags=${cfg#*:}
            thr="" n=${TNGEN:-64}
            [ "$rate" = free ] || thr="--throttle $rate --throttle-sim"
            [ "$rate" = 3M ] && n=16
            tmem=$(tiny_mem "$n")
            # shellcheck disable=SC2086
            "$BIN" bench -m "$TINY" --mem "$tmem" -p 0 -n "$n" -r "${TREPS:-3}" -t "$T" --no-probe $thr $flags \
                --json-out "$OUT/admit-$rate-$label.json" >"$OUT/admit-$rate-$label.txt" 2>&1 ||
                echo "failed: $label at $rate (see $OUT/admit-$rate-$label.txt)" >&2
            args="$args $rate/$label=$OUT/admit-$rate-$label.json"
        done
        # shellcheck disable=SC2086
        admit_table $args
    done
    if [ "$(id -u)" = 0 ] && [ -w /sys/fs/cgroup/blkio ] && [ -f "$MODEL" ]; then
        size=$(stat -c %s "$MODEL")
        echo "== 0b. $MODEL at file/3 through blkio, cost against rank (tg$NGEN x $REPS)"
        args=""
        for rate in 1G 500M; do
            for label in cost rank; do
                drop
                "$BIN" bench -m "$MODEL" --mem $((size / 3)) -p 0 -n "$NGEN" -r "$REPS" -t "$T" --no-probe \
                    --throttle "$rate" --prefetch-admit $label --json-out "$OUT/admit-big-$rate-$label.json" \
                    >"$OUT/admit-big-$rate-$label.txt" 2>&1 || echo "failed: $label at $rate" >&2
                args="$args $rate/$label=$OUT/admit-big-$rate-$label.json"
            done
        done
        # shellcheck disable=SC2086
        admit_table $args
    else
        echo "(0b skipped: blkio throttling needs root and $MODEL)"
    fi
fi
[ "$WHAT" = tiny ] && exit 0

[ -f "$MODEL" ] || { echo "no $MODEL: sluice synth --like qwen3-30b-a3b --type Q4_K -o $MODEL" >&2; exit 1; }
size=$(stat -c %s "$MODEL")
m3=$((size / 3)) m6=$((size / 6))

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
