#!/bin/sh
# Memory under pressure: 20 streaming runs of the bundled model, each inside
# a cgroup-v1 memory group whose limit (page cache included) is its --mem
# budget plus a slack of 8 MiB (the same slack as stream.sh: allocator and
# libc arenas the planner does not itemise), with random budgets from the
# smallest the planner accepts (one token's experts) upward, random prompts,
# batch sizes and thread counts.  Each must finish (no OOM kill, peak within
# the limit) with the generated ids and prompt logits of the in-RAM run.
# SLUICE_CG_SEED picks another draw; skipped where cgroups are not writable.
. tests/cli_lib.sh
need_python "cgroup tests"
CG=bench/cgrun.sh
SLACK=$((8 * 1048576))
SEED=${SLUICE_CG_SEED:-13}
if nm "$BIN" 2>/dev/null | grep -q __asan_init; then
    # the budget plans the engine's memory, not ASan's shadow and quarantine
    skip "cgroup: 20 random streaming runs within --mem + 8 MiB" "an ASan build needs more than its --mem"
    exit 0
fi
if ! sh "$CG" $((256 * 1048576)) -- true 2>/dev/null; then
    skip "cgroup: 20 random streaming runs within --mem + 8 MiB" "cgroup v1 memory controller not writable here"
    exit 0
fi
set -- "Once upon a time there lived a king who had three daughters." \
       "The history of the world is the history of a few men who had faith in themselves." \
       "“Where are you going?” said the old woman to the boy at the gate."
i=0
for p in "$@"; do
    gen "$MODEL" "$T/ram$i" -n 24 -p "$p" || { notok "cgroup setup" "$(head -c 300 "$T/ram$i.err")"; exit 1; }
    i=$((i + 1))
done
# the draws: prompt, threads, batch, slots (>= 4, the experts one token uses)
awk -v s="$SEED" 'BEGIN { srand(s); for (k = 0; k < 20; k++)
    printf "%d %d %d %d\n", int(rand() * 3), 1 + int(rand() * 3), 1 + int(rand() * 16), 4 + int(rand() * 28) }' >"$T/draws"
bad=0 n=0 worst=0
while read -r pi th bs slots; do
    n=$((n + 1))
    mem=$(budget "$MODEL" "$slots" -t "$th" -b "$bs")
    [ -n "$mem" ] || { bad=$((bad + 1)); echo "# run $n: no budget"; continue; }
    eval "prompt=\${$((pi + 1))}"
    limit=$((mem + SLACK))
    sh "$CG" $limit --drop-caches -- "$BIN" run -m "$MODEL" --json --temp 0 -n 24 -p "$prompt" --mem "$mem" \
        -t "$th" -b "$bs" --logits-out "$T/cg.logits" >"$T/cg.json" 2>"$T/cg.err"
    rc=$?
    peak=$(sed -n 's/.*peak \([0-9]*\) bytes.*/\1/p' "$T/cg.err" | tail -1)
    oom=$(sed -n 's/.*oom_kill \([0-9]*\).*/\1/p' "$T/cg.err" | tail -1)
    why=""
    [ $rc -eq 0 ] || why="exit $rc: $(grep -v '^cgrun' "$T/cg.err" | tail -c 200)"
    [ -z "$why" ] && [ "${oom:-1}" != 0 ] && why="oom_kill $oom"
    [ -z "$why" ] && [ "${peak:-0}" -gt "$limit" ] && why="peak $peak > limit $limit"
    if [ -z "$why" ]; then
        cmp -s "$T/ram$pi.logits" "$T/cg.logits" || why="prompt logits differ from the in-RAM run"
        python3 -c "import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); sys.exit(a['ids']!=b['ids'])" \
            "$T/ram$pi.json" "$T/cg.json" || why="generated ids differ from the in-RAM run"
    fi
    headroom=$((limit - ${peak:-0}))
    echo "# run $n: prompt $pi, -t $th -b $bs, $slots slots, --mem $mem, peak ${peak:-?} (headroom $headroom)${why:+: $why}"
    [ -n "$why" ] && bad=$((bad + 1))
done <"$T/draws"
if [ $bad -eq 0 ] && [ $n -eq 20 ]; then
    ok "cgroup: 20 random streaming runs within --mem + 8 MiB, same tokens as in RAM (seed $SEED)"
else
    notok "cgroup: 20 random streaming runs within --mem + 8 MiB (seed $SEED)" "$bad of $n runs failed (see the # lines)"
fi
[ $fails -eq 0 ]
