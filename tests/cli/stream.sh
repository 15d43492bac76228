#!/bin/sh
# Streaming experts from disk changes only timing, never output: for budgets
# that force heavy eviction, every --io mode and several thread counts, the
# generated ids and the prompt's logits must equal the all-in-RAM run byte
# for byte.  Also: the run stays inside a cgroup memory limit of its budget
# plus a small slack (page cache included), a failed read is a clear error,
# and budgets that cannot work are refused with a clear message.
# Prints ok / not ok / skip lines like the C tests.  JSON is read with python3.
. "$(dirname "$0")/../cli_lib.sh"
need_python "cli stream tests"

# ---- tinymoe: budgets from roomy to one token's working set ----
P="Once upon a time there lived a king who had three daughters."
M4=$(budget "$MODEL" 4) M6=$(budget "$MODEL" 6) M20=$(budget "$MODEL" 20) M4t1=$(budget "$MODEL" 4 -t 1)
M6t3=$(budget "$MODEL" 6 -t 3)
if [ -z "$M4" ] || [ -z "$M20" ]; then
    notok "stream setup" "sluice inspect --json --mem failed"
    exit 1
fi
if ! gen "$MODEL" "$T/ram" -n 40 -p "$P"; then
    notok "stream setup" "in-RAM run failed: $(head -c 300 "$T/ram.err")"
    exit 1
fi
for cfg in "--mem 200M" "--mem $M20" "--mem $M4" "--mem $M4t1 -t 1" "--mem $M6 --io pread" "--mem $M6t3 -t 3" \
           "--mem $M6 -b 5" "--io mmap" "--mem $M4t1 --io pread -t 1" "--io pread" \
           "--mem $M4 --cache-policy lru" "--mem $M6 --cache-policy lfru --prefetch next" \
           "--mem $M4t1 -t 1 --cache-policy ahead --prefetch next" "--mem $M6 --cache-policy ahead --prefetch off"; do
    # shellcheck disable=SC2086
    if gen "$MODEL" "$T/s" -n 40 -p "$P" $cfg; then
        same_run "stream tinymoe $cfg = in RAM" "$T/ram" "$T/s"
    else
        notok "stream tinymoe $cfg = in RAM" "$(head -c 300 "$T/s.err")"
    fi
done

# ---- from a multi-drive pack (two directories on this machine's one disk) ----
mkdir -p "$T/d1" "$T/d2"
if "$BIN" pack "$MODEL" --drive "$T/d1" --drive "$T/d2" --replicate-hot 0.25 -o "$T/tiny.pack" >/dev/null 2>"$T/pack.err"; then
    for cfg in "--mem $M6" "--mem $M6 --verify" "--mem $M4t1 --io pread -t 1"; do
        # shellcheck disable=SC2086
        if gen "$MODEL" "$T/p" -n 40 -p "$P" --pack "$T/tiny.pack" $cfg; then
            same_run "stream tinymoe --pack (2 drives) $cfg = in RAM" "$T/ram" "$T/p"
        else
            notok "stream tinymoe --pack (2 drives) $cfg = in RAM" "$(head -c 300 "$T/p.err")"
        fi
    done
else
    notok "stream: sluice pack" "$(head -c 300 "$T/pack.err")"
fi

# in RAM the streaming figures are null (not streamed), the rest measured
"$BIN" run -m "$MODEL" --json --temp 0 -n 4 -p "$P" >"$T/r.json" 2>"$T/r.err"
if python3 - "$T/r.json" <<'EOF'
import json, sys
o = json.load(open(sys.argv[1]))
assert o["streaming"] == 0 and o["decode_tps"] > 0 and o["compute_s"] > 0, o
for k in ("expert_bytes_read", "expert_bytes_per_token", "cache_hits", "io_wait_s", "read_gbps"):
    assert k in o and o[k] is None, (k, o.get(k))
EOF
then ok "stream: an in-RAM run's streaming figures are null"
else notok "stream: an in-RAM run's streaming figures are null" "$(head -c 300 "$T/r.err")"; fi

# the budget really forced eviction and the figures add up
"$BIN" run -m "$MODEL" --json --temp 0 -n 40 -p "$P" --mem "$M6" >"$T/f.json" 2>"$T/f.err"
if python3 - "$T/f.json" <<'EOF'
import json, sys
o = json.load(open(sys.argv[1]))
assert o["streaming"] == 1, "not streaming"
assert o["cache_misses"] > 192, "expected heavy eviction (6 slots), got %d misses" % o["cache_misses"]
assert o["cache_hits"] + o["cache_misses"] >= 4 * 6 * 40, "lookups"
assert o["expert_bytes_read"] >= o["cache_misses"] * 150000, "bytes read vs misses"
assert 1.0 <= o["prefill_read_amplification"] <= 1.1, "prefill amplification %g" % o["prefill_read_amplification"]
for k in ("expert_bytes_per_token", "distinct_experts", "io_wait_s", "compute_s", "read_gbps", "peak_rss_bytes"):
    assert k in o, "missing " + k
EOF
then ok "stream figures: heavy eviction, prefill read amplification <= 1.1"
else notok "stream figures: heavy eviction, prefill read amplification <= 1.1" "$(cat "$T/f.json" | head -c 300)"
fi

# ---- deepseek2 (MLA, shared experts, sigmoid gating, groups) ----
DS="$SHARED/models/arch/deepseek2-dsv3-F16.gguf"
if [ -f "$DS" ]; then
    gen "$DS" "$T/dram" -n 24 --prompt-ids 15496,11,616,1438,318 --kv f32
    for cfg in "--mem 1G" "--io pread" "--io mmap"; do
        # shellcheck disable=SC2086
        gen "$DS" "$T/ds" -n 24 --prompt-ids 15496,11,616,1438,318 --kv f32 $cfg &&
            same_run "stream deepseek2-dsv3 $cfg = in RAM" "$T/dram" "$T/ds" ||
            notok "stream deepseek2-dsv3 $cfg = in RAM" "$(head -c 300 "$T/ds.err")"
    done
    # caches of 4 and 8 of its 32 routed experts
    for k in 4 8; do
        mem=$(budget "$DS" $k -c 512 --kv f32)
        gen "$DS" "$T/ds" -n 24 --prompt-ids 15496,11,616,1438,318 --kv f32 --mem "$mem" -c 512 &&
            same_run "stream deepseek2-dsv3 with $k of 32 experts cached = in RAM" "$T/dram" "$T/ds" ||
            notok "stream deepseek2-dsv3 with $k of 32 experts cached = in RAM" "$(head -c 300 "$T/ds.err")"
    done
else
    skip "stream deepseek2-dsv3" "$DS not present"
fi

# ---- a failed read stops the run with the file and offset ----
SLUICE_FAULT_READ=30 "$TBIN" run -m "$MODEL" --temp 0 -n 40 -p "$P" --mem "$M6" >/dev/null 2>"$T/fault.err"
rc=$?
if [ $rc -eq 1 ] && grep -q "tinymoe-q8_0.gguf: read of expert .* at offset [0-9]* failed: Input/output error" "$T/fault.err"; then
    ok "stream: a failed read is an error naming file and offset"
else
    notok "stream: a failed read is an error naming file and offset" "exit $rc: $(head -c 300 "$T/fault.err")"
fi

# ---- budgets that cannot work are refused ----
"$BIN" run -m "$MODEL" -n 4 -p "$P" --mem 20M >/dev/null 2>"$T/small.err"
rc=$?
if [ $rc -ne 0 ] && grep -q "is too small: the spine" "$T/small.err"; then ok "stream: --mem below the spine is refused"
else notok "stream: --mem below the spine is refused" "exit $rc: $(head -c 200 "$T/small.err")"; fi
"$BIN" run -m "$MODEL" -n 4 -p "$P" --mem 1K >/dev/null 2>"$T/small.err"
if grep -q -- "--mem 1.0 KiB is too small" "$T/small.err"; then ok "stream: a budget under 1 MiB is reported in KiB"
else notok "stream: a budget under 1 MiB is reported in KiB" "$(head -c 200 "$T/small.err")"; fi
"$BIN" run -m "$MODEL" -n 4 -p "$P" --mem $((M4 - 4096)) >/dev/null 2>"$T/small.err"
rc=$?
if [ $rc -ne 0 ] && grep -q "less than the 4 experts .* one token needs; raise --mem to at least" "$T/small.err"; then
    ok "stream: a cache smaller than one token's experts is refused"
else
    notok "stream: a cache smaller than one token's experts is refused" "exit $rc: $(head -c 200 "$T/small.err")"
fi
"$BIN" inspect "$MODEL" --mem 64M >"$T/plan.txt" 2>&1 &&
    grep -q "expert cache: .* = [0-9]* of 192 experts" "$T/plan.txt" &&
    ok "stream: inspect --mem prints the plan" || notok "stream: inspect --mem prints the plan" "$(tail -5 "$T/plan.txt")"

# ---- hard budget under a cgroup memory limit (page cache counts) ----
CG=$(dirname "$0")/../../bench/cgrun.sh
limit=$((M6 + 8 * 1048576))
sh "$CG" $limit --drop-caches -- "$BIN" run -m "$MODEL" --json --temp 0 -n 40 -p "$P" --mem "$M6" \
    --logits-out "$T/cg.logits" >"$T/cg.json" 2>"$T/cg.err"
rc=$?
if [ $rc -eq 125 ]; then
    skip "stream: runs within a cgroup limit of --mem + 8 MiB" "cgroup v1 memory controller not writable here"
elif [ $rc -eq 0 ]; then
    same_run "stream: runs within a cgroup limit of --mem + 8 MiB, same output" "$T/ram" "$T/cg"
else
    notok "stream: runs within a cgroup limit of --mem + 8 MiB" "exit $rc: $(tail -c 300 "$T/cg.err")"
fi

[ $fails -eq 0 ]
