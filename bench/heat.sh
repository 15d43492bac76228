#!/bin/sh
# Heat on the trained fixture, end to end through the store: build a heat
# file from history runs, then run held-out text under the same --mem budget
# three ways: no heat, heat-seeded cache, and heat-seeded cache with a pinned
# tier.  Prints the cache hit rate of each.
#   bench/heat.sh [SLOTS] [PIN_SLOTS]     (default 24 slots = 12.5% of the experts, pin 12)
# env PREFETCH=off (default: the cache policy alone) or auto (with next-layer
# prefetch, whose reads land in the cache before the router asks: hits then
# count prefetched experts too).
set -u
cd "$(dirname "$0")/.."
BIN=${SLUICE_BIN:-build/sluice}
MODEL=models/tinymoe-q8_0.gguf
SLOTS=${1:-24}
PIN=${2:-12}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export XDG_CACHE_HOME="$T/cache"
HEAT="$T/tinymoe.heat"

plan=$("$BIN" inspect "$MODEL" --json --mem 4G -b 1 | python3 -c "
import json, sys
p = json.load(sys.stdin)['memory_plan']
print(p['total'] - p['cache'] - p['unused'], p['slot_bytes'])")
fixed=${plan% *} slot=${plan#* }
MEM=$((fixed + SLOTS * slot))
PINB=$((PIN * slot))
echo "budget: --mem $MEM bytes = $SLOTS expert slots of 192 ($((SLOTS * 100 / 192))%), pinned tier $PIN slots"

# Real held-out text: the routing trace's validation tokens (16 windows of
# 512, books the model never saw), fed one token per forward pass (-b 1) so
# the cache sees decode-like traffic.  Windows 0-7 build the heat, 8-15 are
# the held-out runs.
TRACE=${SLUICE_SHARED:-../shared}/traces/tinymoe-valid-routes.json
if [ ! -f "$TRACE" ]; then echo "skip: $TRACE not present"; exit 0; fi
window() { python3 -c "
import json, sys
t = json.load(open(sys.argv[1]))['token_ids']; w = int(sys.argv[2])
print(','.join(map(str, t[w * 512:w * 512 + 511])))" "$TRACE" "$1"; }

for w in 0 1 2 3 4 5 6 7; do
    "$BIN" run -m "$MODEL" --mem "$MEM" --heat-file "$HEAT" -b 1 -n 1 --prompt-ids "$(window $w)" >/dev/null 2>&1
done
"$BIN" heat -m "$MODEL" --heat-file "$HEAT" | sed -n 3,4p

for mode in none seed pin; do
    hits=0 misses=0
    for w in 8 9 10 11 12 13 14 15; do
        cp "$HEAT" "$T/h.heat"  # each held-out run starts from the history alone
        case $mode in
            none) extra="--no-heat" ;;
            seed) extra="--heat-file $T/h.heat" ;;
            pin) extra="--heat-file $T/h.heat --pin $PINB" ;;
        esac
        # shellcheck disable=SC2086
        o=$("$BIN" run -m "$MODEL" --mem "$MEM" $extra --prefetch "${PREFETCH:-off}" -b 1 -n 1 --json --prompt-ids "$(window $w)" 2>/dev/null)
        h=$(printf '%s' "$o" | python3 -c "import json,sys; o=json.load(sys.stdin); print(o['cache_hits'], o['cache_misses'])")
        hits=$((hits + ${h% *})) misses=$((misses + ${h#* }))
    done
    echo "held-out, $mode: hit rate $(python3 -c "print('%.1f%%' % (100 * $hits / ($hits + $misses)))") ($hits hits, $misses misses)"
done
