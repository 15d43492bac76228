#!/bin/sh
# Streaming benchmark: a MoE model about 3x larger than the memory budget,
# decode and prefill with sluice's expert store (io_uring, pread) against
# the page cache (--io mmap), all under the same cgroup memory limit (page
# cache counted), plus trace replays of the cache policies.
#
#   bench/stream.sh [MODEL.gguf]        (default: /work/synth-models/q3a3b-q4k.gguf,
#                                        made with sluice synth if absent)
# env: MEM (budget, default 6G), SLACK (cgroup slack, default 256M), THREADS
#      (default 2), NGEN (tokens per decode test, default 32), OUT (directory
#      for the JSON results, default build/bench/stream)
# Needs root for the cgroup (bench/cgrun.sh); without it runs uncapped and says so.
set -u
cd "$(dirname "$0")/.."
BIN=${SLUICE_BIN:-build/sluice}
MODEL=${1:-/work/synth-models/q3a3b-q4k.gguf}
MEM=${MEM:-6G}
SLACK=${SLACK:-256M}
THREADS=${THREADS:-2}
NGEN=${NGEN:-32}
OUT=${OUT:-build/bench/stream}
mkdir -p "$OUT"

bytes() { python3 -c "
import re, sys
m = re.fullmatch(r'([0-9.]+)([KMGT]?)', sys.argv[1]); u = {'': 1, 'K': 1 << 10, 'M': 1 << 20, 'G': 1 << 30, 'T': 1 << 40}
print(int(float(m.group(1)) * u[m.group(2)]))" "$1"; }

if [ ! -f "$MODEL" ]; then
    echo "== $MODEL not found: writing a Qwen3-30B-A3B-shaped Q4_K model with sluice synth"
    "$BIN" synth --like qwen3-30b-a3b --type Q4_K -o "$MODEL" || exit 1
fi
LIMIT=$(( $(bytes "$MEM") + $(bytes "$SLACK") ))
CG="sh bench/cgrun.sh $LIMIT --drop-caches --"
if ! sh bench/cgrun.sh $LIMIT -- true 2>/dev/null; then
    echo "== cgroups not usable here: running without a memory limit (figures still valid, the cap is not enforced)"
    CG=""
fi

echo "== model: $MODEL ($(du -h "$MODEL" | cut -f1)), budget --mem $MEM, cgroup limit $LIMIT bytes, $THREADS threads"
"$BIN" inspect "$MODEL" --mem "$MEM" -c 1024 -t "$THREADS" | sed -n '/memory plan/,$p'

# ---- decode ----
for io in uring pread mmap; do
    n=$NGEN
    [ "$io" = mmap ] && n=$(( NGEN / 4 > 4 ? NGEN / 4 : 4 ))   # mmap is slow: fewer tokens
    echo "== decode, --io $io, tg$n"
    $CG "$BIN" bench -m "$MODEL" --mem "$MEM" --io "$io" -p 0 -n "$n" -r 1 -t "$THREADS" \
        --json-out "$OUT/tg-$io.json" 2>&1 | grep -v '^$'
done

# ---- prefill of a 512-token prompt: read amplification and time to first token ----
python3 - "$OUT/prompt512.txt" <<'EOF'
import sys
words = ("the old man looked at the sea and said that the wind had changed in the night and the boats "
         "would have to wait for the tide before they could leave the harbour again").split()
text = " ".join(words[i % len(words)] for i in range(1200))
open(sys.argv[1], "w").write(text)
EOF
for io in uring mmap; do
    echo "== prefill, --io $io, 512-token prompt"
    $CG "$BIN" run -m "$MODEL" --mem "$MEM" --io "$io" -f "$OUT/prompt512.txt" -c 1024 -n 1 -t "$THREADS" \
        --temp 0 --stats-json "$OUT/pp-$io.json" >/dev/null 2>"$OUT/pp-$io.err"
    tail -1 "$OUT/pp-$io.err"
    python3 -c "
import json, sys
o = json.load(open(sys.argv[1]))
print('   prompt %d tokens: ttft %.1f s, %.2f tokens/s, expert bytes read %.2f GB, prefill read amplification %.3f' % (
    o['prompt_tokens'], o['ttft_s'], o['prompt_tps'], o['expert_bytes_read'] / 1e9, o['prefill_read_amplification']))" \
        "$OUT/pp-$io.json" 2>/dev/null || cat "$OUT/pp-$io.err"
done

# ---- cache policies on the real routing trace ----
TRACE=${SLUICE_SHARED:-../shared}/traces/tinymoe-valid-routes.json
if [ -f "$TRACE" ]; then
    echo "== trace replay (hit rates, LRU vs LFRU)"
    "$BIN" replay --trace "$TRACE"
fi
