#!/bin/sh
# Cache policies against the offline optimum on routing traces: for cache
# sizes of 10-50% of the experts, the hit rate of every policy and its
# misses / Belady's misses (issue 15's goal: <= 1.3 at every size).
#   sh bench/replay.sh [TRACE...]   (default: ../shared/traces/tinymoe-valid-routes.json)
# Live traces come from `sluice run ... --trace-out FILE` (bench/cache_figures.sh makes them for the 17 GB synthetic model).
# Replay is deterministic: the figures do not depend on machine load.
BIN=${SLUICE_BIN:-build/sluice}
[ $# -gt 0 ] || set -- "${SLUICE_SHARED:-../shared}/traces/tinymoe-valid-routes.json"
for tr in "$@"; do
    total=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["n_layer"]*d["n_expert"])' "$tr") || exit 1
    slots=$(python3 -c 'import sys; t=int(sys.argv[1]); print(",".join(str(max(1, round(t*p/100))) for p in (10,20,30,40,50)))' "$total")
    echo "== $tr"
    "$BIN" replay --trace "$tr" --slots "$slots" --policy lru,lfru,ahead,opt ${REPLAY_ARGS:-} >/tmp/replay.$$ || exit 1
    head -2 /tmp/replay.$$
    awk '$1 == "slots" { for (i = 3; i <= NF; i++) name[i] = $i; n = NF; hdr = sprintf("%8s %8s", "slots", "share");
                         for (i = 3; i <= n; i++) hdr = hdr sprintf(" %11s", name[i]);
                         for (i = 3; i < n; i++) hdr = hdr sprintf(" %12s", name[i] "/opt"); print hdr; next }
         $1 ~ /^[0-9]+$/ { line = sprintf("%8s %8s", $1, $2); opt = 100 - $n;
                         for (i = 3; i <= n; i++) line = line sprintf(" %10s hit", $i);
                         for (i = 3; i < n; i++) line = line sprintf(" %11.2fx", opt > 0 ? (100 - $i) / opt : 0);
                         print line }' /tmp/replay.$$
    rm -f /tmp/replay.$$
done
