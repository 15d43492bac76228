#!/bin/sh
# The cache policies and the offline optimum from the command line:
# `run --trace-out` writes a trace that `replay` reads back (Belady's MIN
# hits at least as often as every online policy on it); `replay --policy
# opt` on the shared tinymoe trace gives the figures issue 15 quotes for
# Belady (computed outside sluice); a streaming run's --stats-json carries
# demand misses, prefetch reads and the optimum's bytes, which no run can
# beat; every --cache-policy gives the in-RAM logits; bad values are
# refused before any work.  JSON is read with python3.
. "$(dirname "$0")/../cli_lib.sh"
need_python "cli cache tests"

py() { code=$1; shift; python3 -c "import json, sys
$code" "$@"; }

P="The old man looked at the sea and said"
MEM=$("$BIN" inspect "$MODEL" --json --mem 4G 2>/dev/null | py '
p = json.load(sys.stdin)["memory_plan"]
print(p["total"] - p["cache"] - p["unused"] + 40 * p["slot_bytes"])')

"$BIN" run -m "$MODEL" --temp 0 -n 24 -p "$P" --logits-out "$T/ram.logits" >/dev/null 2>"$T/ram.err" ||
    notok "cache setup" "$(head -c 300 "$T/ram.err")"
for pol in ahead lfru lru; do
    name="run --cache-policy $pol --mem (40 slots) --trace-out: logits = in RAM, trace and figures written"
    if ! "$BIN" run -m "$MODEL" --temp 0 -n 24 -p "$P" --mem "$MEM" --no-heat --cache-policy $pol \
        --trace-out "$T/$pol.trace" --stats-json "$T/$pol.stats" --logits-out "$T/$pol.logits" >/dev/null 2>"$T/$pol.err"; then
        notok "$name" "$(head -c 300 "$T/$pol.err")"
        continue
    fi
    if ! cmp -s "$T/ram.logits" "$T/$pol.logits"; then
        notok "$name" "prompt logits differ from the in-RAM run"
        continue
    fi
    if msg=$(py '
s = json.load(open(sys.argv[1])); t = json.load(open(sys.argv[2]))
st = s.get("stats", s)
for k in ("demand_misses", "prefetch_reads", "prefetch_used", "prefetch_wasted_bytes", "expert_bytes_loaded",
          "optimum_bytes", "optimum_ratio", "disk_busy_fraction"):
    assert k in st, "no %s in --stats-json" % k
assert 0 < st["optimum_bytes"] <= st["expert_bytes_loaded"], "optimum %s vs loaded %s" % (st["optimum_bytes"], st["expert_bytes_loaded"])
assert st["prefetch_used"] <= st["prefetch_reads"]
assert t["n_layer"] == 6 and t["n_expert"] == 32 and t["n_expert_used"] == 4, "geometry"
n = len(t["experts"])
assert n == len(t["token_ids"]) == len(t["predicted"]) and n >= 24 + 8, "rows %d" % n
assert all(len(r) == 6 and all(len(x) == 4 and x == sorted(x) for x in r) for r in t["experts"])
assert any(any(p) for p in t["predicted"]), "no predictions recorded"
' "$T/$pol.stats" "$T/$pol.trace" 2>&1); then ok "$name"; else notok "$name" "$msg"; fi
done

# The admission rules (--prefetch-admit): same logits; the demand-behind-
# prefetch counters present and consistent (a part of the demand reads,
# none without prefetch, each demand miss at least one read request).
for adm in cost rank off; do
    for pf in auto off; do
        name="run --prefetch $pf --prefetch-admit $adm: logits = in RAM, demand-behind-prefetch counters consistent"
        if ! "$BIN" run -m "$MODEL" --temp 0 -n 24 -p "$P" --mem "$MEM" --no-heat --prefetch $pf --prefetch-admit $adm \
            --stats-json "$T/adm.stats" --logits-out "$T/adm.logits" >/dev/null 2>"$T/adm.err"; then
            notok "$name" "$(head -c 300 "$T/adm.err")"
            continue
        fi
        if ! cmp -s "$T/ram.logits" "$T/adm.logits"; then
            notok "$name" "prompt logits differ from the in-RAM run"
            continue
        fi
        if msg=$(py '
s = json.load(open(sys.argv[1])); st = s.get("stats", s); pf = sys.argv[2]
for k in ("demand_reads", "demand_behind_prefetch", "prefetch_skipped", "demand_misses", "prefetch_reads"):
    assert k in st, "no %s in --stats-json" % k
assert 0 <= st["demand_behind_prefetch"] <= st["demand_reads"], st
assert st["demand_reads"] >= st["demand_misses"] > 0, st
assert 0 <= st["disk_busy_fraction"] <= 1.05, st["disk_busy_fraction"]
if pf == "off":
    assert st["demand_behind_prefetch"] == 0 and st["prefetch_reads"] == 0 and st["prefetch_skipped"] == 0, st
else:
    assert st["prefetch_reads"] > 0, "no guess read"
' "$T/adm.stats" "$pf" 2>&1); then ok "$name"; else notok "$name" "$msg"; fi
    done
done
name="--prefetch-admit bogus is refused before any work"
if ! "$BIN" run -m "$MODEL" -n 1 -p hi --mem "$MEM" --prefetch-admit maybe >"$T/o4" 2>"$T/e4" &&
    grep -q "prefetch-admit" "$T/e4" && [ ! -s "$T/o4" ]; then ok "$name"; else notok "$name" "$(head -c 300 "$T/e4")"; fi

name="replay of a run's trace: opt hits at least as often as lru, lfru and ahead"
if "$BIN" replay --trace "$T/ahead.trace" --slots 19,40,96 >"$T/replay.txt" 2>"$T/replay.err" &&
    msg=$(py '
rows = [l.split() for l in open(sys.argv[1]) if l.split() and l.split()[0].isdigit()]
head = [l.split() for l in open(sys.argv[1]) if l.split()[:1] == ["slots"]][0]
assert len(rows) == 3 and "opt" in head and "ahead+hints" in head, head
o = head.index("opt")
for r in rows:
    v = [float(x.rstrip("%")) for x in r[2:]]
    assert all(v[o - 2] >= x for x in v), r
' "$T/replay.txt" 2>&1); then ok "$name"; else notok "$name" "${msg:-$(head -c 300 "$T/replay.err")}"; fi
name="replay of a missing trace names the file and the reason"
"$BIN" replay --trace "$T/none.json" >/dev/null 2>"$T/none.err"
rc=$?
if [ $rc -ne 0 ] && grep -q "cannot open trace $T/none.json: No such file or directory" "$T/none.err"; then ok "$name"
else notok "$name" "exit $rc: $(head -c 300 "$T/none.err")"; fi

TRACE="$SHARED/traces/tinymoe-valid-routes.json"
name="replay of a trace whose header claims 2e15 layers: refused, nothing allocated (found by fuzz_trace)"
printf '{"model":"x","n_layer":2222222222222223,"n_expert":9,"n_expert_used":2,"experts":[[[0,4],[0,3]]]}' >"$T/huge.json"
printf '{"model":"x","n_layer":2,"n_expert":9,"n_expert_used":2,"experts":[[[0,4],[0,3]],[]]}' >"$T/short.json"
if ! "$BIN" replay --trace "$T/huge.json" >/dev/null 2>"$T/huge.err" && grep -q "n_layer 2222222222222223" "$T/huge.err" &&
    ! "$BIN" replay --trace "$T/short.json" >/dev/null 2>"$T/short.err" && grep -q "experts\[1\] must list 2 layers" "$T/short.err"; then
    ok "$name"
else notok "$name" "$(head -c 300 "$T/huge.err") / $(head -c 300 "$T/short.err")"; fi
name="replay --policy opt on the shared trace = Belady figures of issue 15 (14.7/26.5/40.9/58.8/79.7%)"
if [ ! -f "$TRACE" ]; then
    skip "$name" "../shared not present"
elif "$BIN" replay --trace "$TRACE" --policy opt --slots 6,12,23,46,92 >"$T/opt.txt" 2>"$T/opt.err" &&
    [ "$(awk '$1 ~ /^[0-9]+$/ {printf "%s ", $3}' "$T/opt.txt")" = "14.7% 26.5% 40.9% 58.8% 79.7% " ]; then
    ok "$name"
else
    notok "$name" "$(cat "$T/opt.txt" "$T/opt.err" | head -c 400)"
fi

name="--cache-policy opt / bogus and an unwritable --trace-out are refused before any work"
if ! "$BIN" run -m "$MODEL" -n 1 -p hi --mem "$MEM" --cache-policy opt >/dev/null 2>"$T/e1" &&
    grep -q "needs the future" "$T/e1" &&
    ! "$BIN" run -m "$MODEL" -n 1 -p hi --cache-policy mru >/dev/null 2>"$T/e2" && grep -q "cache-policy" "$T/e2" &&
    ! "$BIN" run -m "$MODEL" -n 1 -p hi --trace-out /nonexistent-dir/t.json >"$T/o3" 2>"$T/e3" &&
    grep -q "/nonexistent-dir/t.json" "$T/e3" && [ ! -s "$T/o3" ]; then
    ok "$name"
else
    notok "$name" "$(cat "$T/e1" "$T/e2" "$T/e3" | head -c 400)"
fi
name="bench --mem --throttle --timeline: a real-text decode, its ceiling, and a picture of it"
if "$BIN" bench -m "$MODEL" --mem "$MEM" -p 0 -n 8 -r 1 -t 1 --no-probe --throttle 200M --cold \
    --timeline "$T/tl.svg" --json-out "$T/bench.json" >"$T/bench.txt" 2>"$T/bench.err" &&
    msg=$(py '
import xml.etree.ElementTree as ET
txt = open(sys.argv[1]).read()
assert "greedy continuations of 1 real texts" in txt and "empty before the first (--cold)" in txt, txt[-400:]
assert "throttled to 0.20 GB/s" in txt and "ceiling" in txt, txt[-400:]
j = json.load(open(sys.argv[2]))["streaming"]
tg = j["per_threads"][0]["tg"]
assert j["throttle_bps"] == 2e8 and j["cold"] is True and j["prefetch_admit"] == "cost", j
assert 0 <= tg["demand_behind_prefetch"] <= tg["demand_reads"] and tg["demand_reads"] > 0, tg
assert "demand reads behind a prefetch" in txt, txt[-400:]
assert tg["optimum_bytes_per_token"] > 0 and 0 <= tg["prefetch_waste_share"] < 1 and 0 < tg["disk_busy_share"] <= 1.01, tg
svg = ET.parse(sys.argv[3]).getroot()
texts = " ".join(t.text or "" for t in svg.iter("{http://www.w3.org/2000/svg}text"))
assert "token 1" in texts and "token 8" in texts and "set the pace" in texts, texts[:300]
assert len(list(svg.iter("{http://www.w3.org/2000/svg}rect"))) > 50
' "$T/bench.txt" "$T/bench.json" "$T/tl.svg" 2>&1); then ok "$name"; else notok "$name" "${msg:-$(head -c 300 "$T/bench.err")}"; fi

name="run --pack (2 drives) --stats-json: per-drive bytes, requests, busy share, rate, replicated share"
mkdir -p "$T/d1" "$T/d2"
if "$BIN" pack "$MODEL" --drive "$T/d1" --drive "$T/d2" --replicate-hot 0.25 -o "$T/tiny.pack" >/dev/null 2>"$T/pack.err" &&
    "$BIN" run -m "$MODEL" --pack "$T/tiny.pack" --mem "$MEM" --no-heat --temp 0 -n 16 -p "$P" \
        --stats-json "$T/pack.stats" >/dev/null 2>"$T/pack.err" &&
    msg=$(py '
s = json.load(open(sys.argv[1])); s = s.get("stats", s); d = s["drives"]
assert len(d) == 2, d
for x in d:
    for k in ("bytes", "requests", "busy_fraction", "measured_rate", "flexible_bytes", "flexible_share"):
        assert k in x, k
    assert x["bytes"] > 0 and x["requests"] > 0 and 0 <= x["flexible_share"] <= 1, x
assert sum(x["flexible_bytes"] for x in d) > 0, "no replicated bytes read"
' "$T/pack.stats" 2>&1); then ok "$name"; else notok "$name" "${msg:-$(head -c 300 "$T/pack.err")}"; fi

[ "$fails" -eq 0 ]
