#!/bin/sh
# `sluice bench` on the bundled model: the JSON contract, llama-bench's
# lists and -o formats (json, jsonl, csv, md), the options it shares with run
# (-b, --prefetch), streaming figures with --mem, --draft, and that it
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
check "bench --json: build commit, model size, context and KV types" '
assert isinstance(o["build_commit"], str) and o["build_commit"], o.get("build_commit")
assert o["model_size"] > 0 and o["model_n_params"] > 0 and o["n_ctx"] >= 8, o
assert o["type_k"] in ("f16", "f32") and o["n_batch"] > 0 and o["sampling"] == "none", o'

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

# -o: llama-bench's record formats over a matrix of lists
"$BIN" bench -p 8,16 -n 4 -pg 8,4 -t 1 -r 2 -o json >"$T/out.json" 2>"$T/err" || echo '[]' >"$T/out.json"
check "bench -o json: one record per test of the matrix (pp lists, tg, -pg)" '
assert [r["test"] for r in o] == ["pp8", "pp16", "tg4", "pp8+tg4"], [r.get("test") for r in o]
assert [(r["n_prompt"], r["n_gen"]) for r in o] == [(8, 0), (16, 0), (0, 4), (8, 4)], o
for r in o:
    assert r["n_threads"] == 1 and r["repetitions"] == 2 and r["warmup"] is True, r
    assert len(r["samples_ts"]) == 2 and len(r["samples_ns"]) == 2 and r["avg_ts"] > 0, r
    assert r["model_filename"].endswith("tinymoe-q8_0.gguf") and r["model_type"] == "qwen3moe", r
    assert r["build_commit"] and r["mem"] is None and r["streaming"] is None, r'

"$BIN" bench -p 8 -n 4 -t 1 -r 1 -o jsonl >"$T/out.jsonl" 2>"$T/err"
if python3 -c "
import json, sys
rs = [json.loads(l) for l in open(sys.argv[1])]
assert [r['test'] for r in rs] == ['pp8', 'tg4'], rs" "$T/out.jsonl" 2>"$T/why"; then ok "bench -o jsonl: one record per line"
else notok "bench -o jsonl: one record per line" "$(tail -1 "$T/why")"; fi

"$BIN" bench -p 8 -n 4 -t 1 -r 2 -o csv >"$T/out.csv" 2>"$T/err"
if python3 -c "
import csv, sys
rs = list(csv.DictReader(open(sys.argv[1])))
assert [r['test'] for r in rs] == ['pp8', 'tg4'], rs
assert all(float(r['avg_ts']) > 0 and len(r['samples_ts'].split(',')) == 2 for r in rs), rs
assert all(r['expert_bytes_per_token'] == '' and r['mem'] == '' for r in rs), 'in RAM: empty'" "$T/out.csv" 2>"$T/why"
then ok "bench -o csv: a header and one row per test, streaming fields empty in RAM"
else notok "bench -o csv: a header and one row per test, streaming fields empty in RAM" "$(tail -1 "$T/why")"; fi

"$BIN" bench -p 8 -n 0 -t 1 -r 1 -b 4,8 >"$T/out.md" 2>"$T/err"
if [ "$(grep -c '| *pp8 |' "$T/out.md")" = 2 ] && grep -q '|       4 |' "$T/out.md" && grep -q 'n_batch' "$T/out.md"
then ok "bench -b 4,8: a row per batch size, with an n_batch column"
else notok "bench -b 4,8: a row per batch size, with an n_batch column" "$(cat "$T/out.md" "$T/err")"; fi

"$BIN" bench -p 8 -n 4 -t 1 -r 1 --mem 48M,64M --no-probe -o json >"$T/out.json" 2>"$T/err" || echo '[]' >"$T/out.json"
check "bench --mem 48M,64M: the model streamed under each budget in turn" '
assert [(r["mem"], r["test"]) for r in o] == [(48 << 20, "pp8"), (48 << 20, "tg4"), (64 << 20, "pp8"), (64 << 20, "tg4")], o
s = [r["streaming"] for r in o]
assert all(x and x["expert_bytes_per_token"] >= 0 for x in s), s
assert s[0]["experts_cached"] < s[2]["experts_cached"], "a bigger budget caches more experts"
assert o[1]["input"].startswith("real text") and o[1]["sampling"] == "greedy", o[1]'

# --draft: every tg measured on an engine without and a fresh one with the
# draft, as greedy continuations of real texts; bench itself checks that
# each drafted decode reproduces the plain one's tokens (it fails if not)
"$BIN" bench -p 8 -n 12 -t 1 -r 2 --draft ngram -o json >"$T/out.json" 2>"$T/err" || echo '[]' >"$T/out.json"
check "bench --draft ngram: pp8 and tg12 plain, then tg12+ngram drafted, as greedy text decodes" '
assert [r["test"] for r in o] == ["pp8", "tg12", "tg12+ngram"], [r["test"] for r in o]
assert o[0]["draft"] is None and o[1]["draft"] is None, o[1]
assert o[1]["input"].startswith("real text") and o[2]["input"].startswith("real text"), o[1]["input"]
d = o[2]["draft"]
assert d["mode"] == "ngram" and 0 <= d["accepted"] <= d["proposed"], d
assert sum(d["k_hist"]) == d["steps"] + d["plain_steps"] > 0, d
assert o[2]["avg_ts"] > 0 and len(o[2]["samples_ts"]) == 2, o[2]'

DRAFT=models/tinydraft-f16.gguf
"$BIN" bench -p 0 -n 16 -t 1 -r 2 --draft "$DRAFT" --draft-max 4 -o json >"$T/out.json" 2>"$T/err" || echo '[]' >"$T/out.json"
check "bench --draft MODEL --draft-max 4 in RAM: the trained draft is accepted, K never above 4" '
assert [r["test"] for r in o] == ["tg16", "tg16+model+ngram"], [r["test"] for r in o]
d = o[1]["draft"]
assert d["accepted"] > 0 and d["acceptance"] > 0, d
assert len(d["k_hist"]) <= 5 and sum(d["k_hist"][1:]) > 0, d
assert len(d["acceptance_by_depth"]) <= 4, d
assert d["union_expert_bytes_per_accepted_token"] > 0, d'

"$BIN" bench -p 0 -n 12 -t 1 -r 1 --draft "$DRAFT" --mem 80M --no-probe -o csv >"$T/out.csv" 2>"$T/err"
if python3 -c "
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert [r['test'] for r in rows] == ['tg12', 'tg12+model+ngram'], rows
assert rows[0]['mem'] == rows[1]['mem'] == str(80 << 20), 'one --mem for both'
assert int(rows[1]['experts_cached']) < int(rows[0]['experts_cached']), 'the draft model took part of --mem'
assert rows[0]['draft_mode'] == '' and rows[1]['draft_mode'] == 'model+ngram', rows[1]
assert float(rows[1]['expert_bytes_per_token']) >= 0" "$T/out.csv" 2>"$T/why"
then ok "bench --draft MODEL --mem: one budget for both engines, the draft model's share taken from the drafted one"
else notok "bench --draft MODEL --mem: one budget for both engines, the draft model's share taken from the drafted one" "$(tail -1 "$T/why") $(tail -1 "$T/err")"; fi

"$BIN" bench -p 0 -n 12 -t 1 -r 1 --draft random --draft-max 3 >"$T/out.md" 2>"$T/err"
if grep -q '| *tg12+random |' "$T/out.md" && grep -q 'reproduced the plain one' "$T/out.md"
then ok "bench --draft random (garbage proposals): the drafted decode still reproduces the plain one"
else notok "bench --draft random (garbage proposals): the drafted decode still reproduces the plain one" "$(cat "$T/out.md" "$T/err")"; fi

refused() { # NAME EXPECTED-MESSAGE ARGS...
    name=$1 msg=$2
    shift 2
    "$BIN" "$@" >/dev/null 2>"$T/err"
    rc=$?
    if [ $rc = 2 ] && grep -qF -- "$msg" "$T/err"; then ok "$name"; else notok "$name" "exit $rc: $(cat "$T/err")"; fi
}
refused "bench -o xml is refused" "-o: expected md, json, jsonl or csv, got 'xml'" bench -o xml
refused "bench -p 1,,2 is refused (no empty list item)" "-p: expected a value or a comma-separated list" bench -p 1,,2
refused "bench -pg 8 is refused (a pair is needed)" "-pg: expected prompt and generation counts" bench -pg 8
refused "bench --json with a -p list points to -o json" "for lists and -pg use -o json" bench --json -p 8,16
refused "run -pg is refused by name" "unknown option -pg" run -pg 8,4 -p hi
refused "bench --draft with --json points to -o json" "with --draft use -o json" bench --json --draft ngram
refused "bench --draft without a tg test is refused" "give a tg test" bench -n 0 --draft ngram
refused "bench --draft-max 17 is refused" "--draft-max" bench --draft ngram --draft-max 17

if "$BIN" bench -p 0 -n 0 >/dev/null 2>"$T/err"; then notok "bench -p 0 -n 0 is refused" "it succeeded"
elif grep -q "nothing to measure" "$T/err"; then ok "bench -p 0 -n 0 is refused"
else notok "bench -p 0 -n 0 is refused" "$(cat "$T/err")"; fi
[ $fails -eq 0 ]
