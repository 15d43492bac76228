#!/bin/sh
# sluice vs llama.cpp, side by side: `sluice bench` and `llama-bench` on the
# same GGUF files, thread counts and prompt/generation lengths, run in
# alternation (the machine is shared, so a slow phase hits both), then one
# table with medians, ratios and decode memory-bandwidth utilisation.
#
#   sh bench/compare_llama.sh [-p 512] [-n 128] [-t 1,2] [-r 3] [-R 2] MODEL.gguf ...
#     -p/-n     prompt and generated tokens (both tools)
#     -t        thread counts, comma-separated
#     -r        repetitions per run (both tools); -R rounds of alternation
#   LLAMA_BIN_DIR=/path/to/llama.cpp/build/bin   where llama-bench is; without
#                 it (or without llama-bench there) only sluice runs
#   LLAMA_ARGS    extra llama-bench arguments (default "-lm none": weights read
#                 into RAM like sluice does, instead of mmap'd page cache)
#   LLAMA_NOREPACK=1  also run llama-bench with its weight repacking off
#                 (every tensor forced to the plain CPU buffer: -ot '.*=CPU')
#   SLUICE_BIN    default build/sluice;  MEMBW_BIN default build/membw
#   OUT           result directory (default build/bench/compare): raw JSON
#                 of every run and table.md
#   DROP_CACHES=1 sync and drop the page cache before each run (root only)
#
# Bandwidth utilisation (tg rows): bytes of weights a decode step reads
# (every spine matrix except the embedding table, plus n_used routed experts
# per MoE layer, from `sluice inspect --json`) times tokens/s, against the
# read bandwidth `membw` measures for the same thread count (best of 4 KiB
# and huge pages).  The KV cache (a few MB at these lengths) is not counted.
# Nothing is built here and llama.cpp is never built or committed by this
# script.
set -u
P=512 N=128 T=1,2 R=3 ROUNDS=2
while [ $# -gt 0 ]; do
    case "$1" in
    -p) P=$2; shift 2 ;;
    -n) N=$2; shift 2 ;;
    -t) T=$2; shift 2 ;;
    -r) R=$2; shift 2 ;;
    -R) ROUNDS=$2; shift 2 ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    -*) echo "compare_llama: unknown option $1" >&2; exit 2 ;;
    *) break ;;
    esac
done
[ $# -gt 0 ] || { echo "usage: sh bench/compare_llama.sh [-p P] [-n N] [-t 1,2] [-r R] [-R ROUNDS] MODEL.gguf ..." >&2; exit 2; }
SL=${SLUICE_BIN:-build/sluice}
MB=${MEMBW_BIN:-build/membw}
OUT=${OUT:-build/bench/compare}
LLAMA_ARGS=${LLAMA_ARGS:--lm none}
[ -x "$SL" ] || { echo "compare_llama: $SL not built (run make)" >&2; exit 1; }
LB=""
if [ -n "${LLAMA_BIN_DIR:-}" ] && [ -x "$LLAMA_BIN_DIR/llama-bench" ]; then
    LB="$LLAMA_BIN_DIR/llama-bench"
else
    echo "compare_llama: llama-bench not found (set LLAMA_BIN_DIR to a llama.cpp build's bin/); sluice only" >&2
fi
mkdir -p "$OUT"
rm -f "$OUT"/run-*.json "$OUT"/load.txt "$OUT"/membw.json

drop() {
    if [ "${DROP_CACHES:-0}" = 1 ]; then sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true; fi
}
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

echo "load average at start: $(loadavg)" | tee -a "$OUT/load.txt"
maxt=$(echo "$T" | tr ',' '\n' | sort -n | tail -1)
if [ -x "$MB" ]; then
    "$MB" -t "$maxt" -w 1024 --json > "$OUT/membw.json" || rm -f "$OUT/membw.json"
else
    echo "compare_llama: $MB not built (make build/membw); no bandwidth utilisation" >&2
fi

i=0
for m in "$@"; do
    [ -f "$m" ] || { echo "compare_llama: $m not found, skipped" >&2; continue; }
    i=$((i + 1))
    "$SL" inspect --json "$m" > "$OUT/model-$i.json" || continue
    for round in $(seq 1 "$ROUNDS"); do
        for t in $(echo "$T" | tr ',' ' '); do
            drop
            echo "[$(loadavg)] model $m round $round threads $t: sluice" >&2
            echo "model $i round $round t $t sluice: $(loadavg)" >> "$OUT/load.txt"
            "$SL" bench -m "$m" -p "$P" -n "$N" -t "$t" -r "$R" --json > "$OUT/run-$i-$round-$t-sluice.json" \
                || rm -f "$OUT/run-$i-$round-$t-sluice.json"
            [ -n "$LB" ] || continue
            for mode in repack norepack; do
                [ $mode = norepack ] && [ "${LLAMA_NOREPACK:-0}" != 1 ] && continue
                extra=""
                [ $mode = norepack ] && extra="-ot .*=CPU"
                drop
                echo "[$(loadavg)] model $m round $round threads $t: llama-bench ($mode)" >&2
                echo "model $i round $round t $t llama-$mode: $(loadavg)" >> "$OUT/load.txt"
                # shellcheck disable=SC2086
                "$LB" -m "$m" -p "$P" -n "$N" -t "$t" -r "$R" -o json $LLAMA_ARGS $extra \
                    > "$OUT/run-$i-$round-$t-llama-$mode.json" 2> "$OUT/llama-stderr.txt" \
                    || rm -f "$OUT/run-$i-$round-$t-llama-$mode.json"
            done
        done
    done
    printf '%s\n' "$m" > "$OUT/model-$i.path"
done
echo "load average at end: $(loadavg)" | tee -a "$OUT/load.txt"

python3 - "$OUT" "$P" "$N" <<'EOF'
import glob, json, os, statistics, sys

out, P, N = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

def weight_bytes_per_token(insp):
    """Weights a decode step reads: the spine minus the embedding table
    (one row is read) unless the output projection is tied to it, plus
    n_used of n_expert routed experts per MoE layer."""
    s = insp["summary"]
    names = {t["name"]: t for t in insp["tensors"]}
    spine = s["spine_bytes"]
    if "output.weight" in names and "token_embd.weight" in names:
        spine -= names["token_embd.weight"]["bytes"]
    return spine + s.get("expert_bytes_per_token", 0)

bw = {}
try:
    for r in json.load(open(os.path.join(out, "membw.json")))["results"]:
        bw[r["threads"]] = max(bw.get(r["threads"], 0), r["read_gbs"])
except (OSError, ValueError, KeyError):
    pass

def samples(files, tool, test):
    v = []
    for f in files:
        try:
            d = json.load(open(f))
        except (OSError, ValueError):
            continue
        if tool == "sluice":
            k = "pp_samples" if test == "pp" else "tg_samples"
            v += d.get(k) or []
        else:
            for r in d:
                if (test == "pp" and r["n_prompt"] > 0 and r["n_gen"] == 0) or \
                   (test == "tg" and r["n_gen"] > 0 and r["n_prompt"] == 0):
                    v += r["samples_ts"]
    return v

def med(v):
    return statistics.median(v) if v else None

def fmt(x, nd=2):
    return "-" if x is None else ("%.*f" % (nd, x))

rows = []
hdr = "| model | threads | test | sluice t/s | llama.cpp t/s | sluice / llama.cpp | llama.cpp no-repack t/s | sluice / no-repack | weights/token | sluice GB/s | read GB/s | utilisation |"
sep = "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
lines = [hdr, sep]
i = 1
while os.path.exists(os.path.join(out, "model-%d.json" % i)):
    insp = json.load(open(os.path.join(out, "model-%d.json" % i)))
    name = os.path.basename(insp["file"])
    wb = weight_bytes_per_token(insp)
    threads = sorted({int(f.split("-")[-2]) for f in glob.glob(os.path.join(out, "run-%d-*-sluice.json" % i))})
    for t in threads:
        for test, tok in (("pp", P), ("tg", N)):
            if tok == 0:
                continue
            g = lambda tool: glob.glob(os.path.join(out, "run-%d-*-%d-%s.json" % (i, t, tool)))
            s = med(samples(g("sluice"), "sluice", test))
            l = med(samples(g("llama-repack"), "llama", test))
            ln = med(samples(g("llama-norepack"), "llama", test))
            ratio = lambda a, b: None if a is None or not b else a / b
            gbs = s * wb / 1e9 if (s and test == "tg") else None
            rb = bw.get(t)
            util = ratio(gbs, rb) if gbs else None
            lines.append("| %s | %d | %s%d | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                name, t, test, tok, fmt(s), fmt(l), fmt(ratio(s, l)), fmt(ln), fmt(ratio(s, ln)),
                "%.0f MB" % (wb / 1e6) if test == "tg" else "",
                fmt(gbs), fmt(rb) if test == "tg" else "", ("%.0f%%" % (100 * util)) if util else ""))
    i += 1
table = "\n".join(lines)
print(table)
with open(os.path.join(out, "table.md"), "w") as f:
    f.write(table + "\n")
print("\nmedians over all repetitions of all rounds; raw JSON, load averages and table.md in %s/" % out)
EOF
