#!/bin/sh
# `sluice bench` on the bundled model: the JSON contract, the options it
# shares with run (-b, --prefetch), streaming figures with --mem, and that it
# leaves the heat file alone unless --heat-file is given (its tokens repeat
# every run).  Speeds are only checked to be positive: timing goals live in
# bench/, not here.
. "$(dirname "$0")/../cli_lib.sh"
need_python "cli bench tests"

check() { # NAME PYTHON-ASSERTIONS-ON-o  (reads $T/out.json)
    if python3 -c "
import json, sys
o = json.load(open(sys.argv[1]))
$2" "$T/out.json" 2>"$T/why"; then ok "$1"; else notok "$1" "$(tail -1 "$T/why")"; fi
}
run_bench() { "$BIN" bench -p 8 -n 4 -r 1 -t 1 --json "$@" >"$T/out.json" 2>"$T/err" || echo '{}' >"$T/out.json"; }

run_bench
check "bench --json: settings and positive medians" '
assert o["p"] == 8 and o["n"] == 4 and o["reps"] == 1 and o["threads"] == 1, o
assert o["pp_tps"] > 0 and o["tg_tps"] > 0
assert len(o["results"]) == 1 and len(o["pp_samples"]) == 1'
check "bench --json in RAM: the streaming figures are null, not zeros" 'assert "streaming" in o and o["streaming"] is None, o.get("streaming")'

run_bench -b 4 --prefetch off --kv f32
check "bench accepts -b, --prefetch and --kv like run" 'assert o["pp_tps"] > 0 and o["tg_tps"] > 0'

run_bench --mem 64M --no-probe
check "bench --mem: streaming figures" '
s = o["streaming"]
assert s["io"] == "uring" or s["io"] == "pread", s
assert 0 < s["experts_cached"] < s["experts"], s
assert s["raw_gbps"] == 0, "--no-probe"
tg = s["per_threads"][0]["tg"]
assert tg["expert_bytes_per_token"] > 0 and 0 <= tg["hit_rate"] <= 1, tg'
if ls "$XDG_CACHE_HOME"/sluice/*.heat >/dev/null 2>&1; then
    notok "bench --mem without --heat-file leaves the heat file alone" "$(ls "$XDG_CACHE_HOME"/sluice)"
else ok "bench --mem without --heat-file leaves the heat file alone"; fi

run_bench --mem 64M --no-probe --heat-file "$T/h.heat"
if [ -s "$T/h.heat" ]; then ok "bench --heat-file records heat"
else notok "bench --heat-file records heat" "$(tail -1 "$T/err")"; fi

if "$BIN" bench -p 0 -n 0 >/dev/null 2>"$T/err"; then notok "bench -p 0 -n 0 is refused" "it succeeded"
elif grep -q "nothing to measure" "$T/err"; then ok "bench -p 0 -n 0 is refused"
else notok "bench -p 0 -n 0 is refused" "$(cat "$T/err")"; fi
[ $fails -eq 0 ]
