#!/bin/sh
# Issue 13's long run: 2,000 generated tokens streaming the 17 GB synthetic
# model (qwen3-30b-a3b shape, q4_K: 17.30 GB) at --mem 6G, printing RSS, its
# peak and tok/s every 100 tokens (bench/long_run.c, public API only).
# Expected: RSS flat after warm-up (no leak), tok/s stable, and (as root)
# the cgroup's peak, page cache included, within --mem + 256 MiB.  Run on a
# quiet machine:
#   sh bench/long_run.sh [MODEL] [MEM] [TOKENS]
# MODEL defaults to $SLUICE_BIG/qwen3-30b-a3b-q4_K.gguf (SLUICE_BIG=/work/big/lead),
# made with `sluice synth` if missing (17 GB of disk).
set -eu
BIG=${SLUICE_BIG:-/work/big/lead}
MODEL=${1:-$BIG/qwen3-30b-a3b-q4_K.gguf}
MEM=${2:-6G}
N=${3:-2000}
make -s build/sluice build/long_run
if [ ! -f "$MODEL" ]; then
    mkdir -p "$(dirname "$MODEL")"
    ./build/sluice synth --like qwen3-30b-a3b -o "$MODEL"
fi
bytes=$(awk -v m="$MEM" 'BEGIN { u = substr(m, length(m)); v = substr(m, 1, length(m) - 1) + 0;
    if (u == "G") print v * 1073741824; else if (u == "M") print v * 1048576; else print m }')
echo "long run: $MODEL, --mem $MEM ($bytes bytes), $N tokens"
# As root, inside a memory cgroup limited to the budget plus 256 MiB (page
# cache included: an overrun is an OOM kill); cgrun prints its peak.
rc=0
sh bench/cgrun.sh $((bytes + 268435456)) --drop-caches -- \
    ./build/long_run "$MODEL" "$bytes" "$N" "The history of the world is" || rc=$?
[ $rc != 125 ] && exit $rc
echo "(no writable memory cgroup here: RSS only, the page cache is not bounded)"
./build/long_run "$MODEL" "$bytes" "$N" "The history of the world is"
