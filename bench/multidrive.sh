#!/bin/sh
# Decode from expert packs on 1, 2 and 4 drive directories, with prefetch
# off and on, under one memory budget.  On this machine every "drive" is a
# directory on the same virtual disk, so little gain is expected: the point
# is that splitting and scheduling cost nothing and that the figures are
# honest.  Simulated drives of known speeds are in bench/pack.sh.
#   bench/multidrive.sh [MODEL.gguf]   (default /work/synth-models/q3a3b-q4k.gguf)
# env: MEM (default 6G), NGEN (default 24), THREADS (default 2),
#      DIRS (where the drive directories go, default /var/tmp/sluice-drives;
#      needs the model's expert bytes free, one pack at a time)
set -u
cd "$(dirname "$0")/.."
BIN=${SLUICE_BIN:-build/sluice}
MODEL=${1:-/work/synth-models/q3a3b-q4k.gguf}
MEM=${MEM:-6G}
NGEN=${NGEN:-24}
THREADS=${THREADS:-2}
DIRS=${DIRS:-/var/tmp/sluice-drives}
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-$(mktemp -d)}

decode() { # LABEL ARGS...: tokens/s, I/O wait and bytes/token of a cold decode
    label=$1; shift
    sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null
    "$BIN" run -m "$MODEL" --mem "$MEM" -t "$THREADS" --temp 0 -n "$NGEN" --no-heat \
        -p "The old man looked at the sea and said" --json "$@" 2>/dev/null | python3 -c "
import json, sys
o = json.load(sys.stdin); p = o.get('prefetch', {})
print('%-34s decode %.2f tok/s  I/O wait %5.1f s  read %.2f GB/s  %.0f MB/token  hits %.1f%%  prefetch recall %s' % (
    sys.argv[1], o['decode_tps'], o['io_wait_s'], o['read_gbps'], o['expert_bytes_per_token'] / 1e6,
    100 * o['cache_hits'] / max(1, o['cache_hits'] + o['cache_misses']),
    ('%.0f%%' % (100 * p['recall'])) if p.get('recall') is not None else '-'))" "$label"
}

echo "== $MODEL, --mem $MEM, $THREADS threads, $NGEN tokens from a cold cache"
for pf in off auto; do decode "GGUF, prefetch $pf" --prefetch $pf; done
for n in 1 2 4; do
    rm -rf "$DIRS"
    drives=""
    i=0
    while [ $i -lt $n ]; do mkdir -p "$DIRS/d$i"; drives="$drives --drive $DIRS/d$i"; i=$((i + 1)); done
    # shellcheck disable=SC2086
    "$BIN" pack "$MODEL" $drives -o "$DIRS/model.pack" >/dev/null 2>&1 || { echo "pack on $n dirs failed"; continue; }
    for pf in off auto; do decode "pack on $n dir(s), prefetch $pf" --pack "$DIRS/model.pack" --prefetch $pf; done
done
rm -rf "$DIRS"
