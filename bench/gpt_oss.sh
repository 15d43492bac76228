#!/bin/sh
# Issue 11, gpt-oss: the figures of the closing note.  Run on a quiet
# machine; every part prints its table.
#
#   sh bench/gpt_oss.sh [ram] [stream]   (default: both)
#
# ram     in RAM against llama.cpp on the real gpt-oss-120b widths scaled to
#         fit: sluice synth --like gpt-oss-120b --layers 4 (all 128 experts,
#         MXFP4 experts, Q8_0 rest as MXFP4_MOE; 1.7 GB per layer of experts,
#         about 7.3 GB), bench/compare_llama.sh -p 512 -n 128 (alternating
#         rounds, medians).  Goal: >= 1.0x decode, >= 0.8x prefill.
# stream  --layers 12 (about 21 GB) under --mem $MEM (default 7G: about 3x):
#         bench/stream.sh (decode with io_uring / pread / mmap, the I/O bound
#         from the disk probe, prefill read amplification, cgroup-capped),
#         then llama-bench (mmap, the page cache is all it has) under the same
#         cgroup limit.
#
# env: BIG (models, default /work/big; made under flock $BIG/.lock and reused
#      by name), LLAMA_BIN_DIR (default /work/llama.cpp/build/bin), MEM (7G),
#      THREADS (2), OUT (build/bench/gpt_oss)
set -u
cd "$(dirname "$0")/.."
BIN=${SLUICE_BIN:-build/sluice}
BIG=${BIG:-/work/big}
LLAMA_BIN_DIR=${LLAMA_BIN_DIR:-/work/llama.cpp/build/bin}
MEM=${MEM:-7G}
THREADS=${THREADS:-2}
OUT=${OUT:-build/bench/gpt_oss}
PARTS=${*:-ram stream}
mkdir -p "$OUT"
[ -x "$BIN" ] || { echo "gpt_oss: $BIN not built (run make)" >&2; exit 1; }

# synth FILE ARGS...: the model in $BIG unless it is there already
synth() {
    file=$1
    shift
    [ -f "$BIG/$file" ] && return 0
    echo "== writing $BIG/$file (sluice synth --like gpt-oss-120b $*)"
    flock "$BIG/.lock" "$BIN" synth --like gpt-oss-120b "$@" -o "$BIG/$file" || exit 1
}

ram() {
    echo "== in RAM vs llama.cpp: gpt-oss-120b widths, 4 layers, 128 experts top-4, MXFP4 experts"
    synth gptoss120b-L4-mxfp4.gguf --layers 4 --type q8_0
    LLAMA_BIN_DIR=$LLAMA_BIN_DIR OUT=$OUT/ram sh bench/compare_llama.sh -p 512 -n 128 -t "$THREADS" -R 3 \
        "$BIG/gptoss120b-L4-mxfp4.gguf"
}

stream() {
    echo "== streaming: gpt-oss-120b widths, 12 layers, under --mem $MEM"
    synth gptoss120b-L12-mxfp4.gguf --layers 12 --type q8_0
    M=$BIG/gptoss120b-L12-mxfp4.gguf
    MEM=$MEM THREADS=$THREADS OUT=$OUT/stream sh bench/stream.sh "$M"
    if [ -x "$LLAMA_BIN_DIR/llama-bench" ]; then
        LIMIT=$(python3 -c "
import re, sys
m = re.fullmatch(r'([0-9.]+)([KMGT]?)', sys.argv[1]); u = {'': 1, 'K': 1 << 10, 'M': 1 << 20, 'G': 1 << 30}
print(int(float(m.group(1)) * u[m.group(2)]) + (256 << 20))" "$MEM")
        echo "== llama-bench (mmap) under the same cgroup limit ($LIMIT bytes)"
        sh bench/cgrun.sh "$LIMIT" --drop-caches -- "$LLAMA_BIN_DIR/llama-bench" -m "$M" -t "$THREADS" -p 0 -n 32 \
            -r 1 -o json >"$OUT/stream/llama-bench.json" 2>"$OUT/stream/llama-bench.err" &&
            python3 -c "import json, sys
for r in json.load(open(sys.argv[1])): print('llama.cpp tg%d: %.2f tok/s' % (r['n_gen'], r['avg_ts']))" \
                "$OUT/stream/llama-bench.json"
    fi
}

for p in $PARTS; do "$p"; done
