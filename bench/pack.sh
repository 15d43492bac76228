#!/bin/sh
# Multi-drive pack benchmarks (docs/PACK.md has the results and how to read them).
#   sh bench/pack.sh [MODEL] [WORKDIR] [SECONDS]
# MODEL defaults to the synthetic Qwen3-30B-shaped model in /work/synth-models,
# else bench/synth_experts.py writes a 3.7 GB experts-only GGUF into WORKDIR.
# Every pack is written under WORKDIR (default
# /var/tmp/sluice-packbench), measured, and deleted before the next, so at most
# one pack (twice the experts' size when fully replicated) exists at a time.
#  1. xxh3 throughput (the cost of --verify)
#  2. random expert reads from the GGUF and from packs on 1, 2 and 4 drive
#     directories; here all on the same disk, so no gain is expected
#  3. the same reads with simulated drives (throttled pread backend): where
#     the multi-drive gain shows
set -eu
MODEL=${1:-/work/synth-models/q3-l12e128s1.gguf}
WORK=${2:-/var/tmp/sluice-packbench}
SECS=${3:-5}
BIN=build/bench/pack_bench
make -s all
mkdir -p build/bench
cc -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -Iinclude -Isrc -pthread bench/pack_bench.c build/libsluice.a \
    -luring -ljansson -lxxhash -lm -pthread -o "$BIN"
mkdir -p "$WORK"
trap 'rm -rf "$WORK"' EXIT
if [ ! -f "$MODEL" ]; then
    # no large model at hand: a 3.7 GB file of random Q8_0 experts, deleted at exit
    MODEL=$WORK/experts.gguf
    python3 bench/synth_experts.py "$MODEL"
fi

# pack NAME NDRIVES FRACTION: writes $WORK/NAME.pack over NDRIVES directories
pack() {
    dirs=""
    i=0
    while [ $i -lt "$2" ]; do mkdir -p "$WORK/$1-d$i"; dirs="$dirs --drive $WORK/$1-d$i"; i=$((i + 1)); done
    # shellcheck disable=SC2086
    ./build/sluice pack "$MODEL" $dirs --replicate-hot "$3" -o "$WORK/$1.pack" | sed 's/^/    /'
}
unpack() { rm -rf "$WORK/$1.pack" "$WORK/$1"-d*; }

echo "== model $MODEL"
echo "== 1. verify cost"
$BIN --xxh3
echo "== 2. random expert reads, io_uring + O_DIRECT, batch 8, ${SECS}s each (same physical disk)"
$BIN "$MODEL" --seconds "$SECS"
for n in 1 2 4; do
    pack p$n $n 0
    $BIN "$MODEL" --pack "$WORK/p$n.pack" --seconds "$SECS"
    [ $n = 2 ] && $BIN "$MODEL" --pack "$WORK/p$n.pack" --seconds "$SECS" --verify
    [ $n = 4 ] || unpack p$n
done
echo "== 3. simulated drives (throttled pread backend), ${SECS}s each"
echo "   (an expert on one drive waits for that drive: with one copy per expert the busiest"
echo "    drive of each step sets its time; a second copy lets the scheduler balance)"
pack p1 1 0
$BIN "$MODEL" --pack "$WORK/p1.pack" --seconds "$SECS" --throttle 200
unpack p1
$BIN "$MODEL" --pack "$WORK/p4.pack" --seconds "$SECS" --throttle 200,200,200,200
unpack p4
pack p2 2 0
$BIN "$MODEL" --pack "$WORK/p2.pack" --seconds "$SECS" --throttle 200,200
$BIN "$MODEL" --pack "$WORK/p2.pack" --seconds "$SECS" --throttle 200,400
unpack p2
pack p2h 2 0.5
$BIN "$MODEL" --pack "$WORK/p2h.pack" --seconds "$SECS" --throttle 200,200
$BIN "$MODEL" --pack "$WORK/p2h.pack" --seconds "$SECS" --throttle 200,400
unpack p2h
pack p2r 2 1
$BIN "$MODEL" --pack "$WORK/p2r.pack" --seconds "$SECS" --throttle 200,200
$BIN "$MODEL" --pack "$WORK/p2r.pack" --seconds "$SECS" --throttle 200,400
unpack p2r
pack p4r 4 1
$BIN "$MODEL" --pack "$WORK/p4r.pack" --seconds "$SECS" --throttle 200,200,200,200
unpack p4r
