#!/bin/sh
# sluice heat and sluice replay --heat-from-tokens from the command line:
# import a small routing trace, show it as text, JSON and SVG, survive a
# damaged file, reset.  Prints ok / not ok / skip lines like the C tests.
BIN=${SLUICE_BIN:-build/sluice}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export XDG_CACHE_HOME="$tmp/cache"
fails=0
check() { # name, then a command that must succeed
    name=$1; shift
    if "$@" >/dev/null 2>&1; then echo "ok heat cli: $name"; else echo "not ok heat cli: $name"; fails=$((fails + 1)); fi
}

# 20 tokens; every token uses experts 0-3 at layers 0-4, and 0-2 plus one of 4-7 (rotating) at layer 5
{
    printf '{"n_layer": 6, "n_expert": 32, "n_expert_used": 4, "experts": ['
    t=0
    while [ $t -lt 20 ]; do
        [ $t -gt 0 ] && printf ','
        printf '[[0,1,2,3],[0,1,2,3],[0,1,2,3],[0,1,2,3],[0,1,2,3],[0,1,2,%d]]' $((4 + t % 4))
        t=$((t + 1))
    done
    printf ']}'
} >"$tmp/trace.json"

check "no heat at first" sh -c "'$BIN' heat | grep -q 'no heat recorded for tinymoe'"
check "trace import" sh -c "'$BIN' heat --trace '$tmp/trace.json' | grep -q 'imported 20 forward passes'"
check "file under XDG_CACHE_HOME" sh -c "ls '$tmp/cache/sluice/' | grep -q '^[0-9a-f]\{32\}\.heat$'"
"$BIN" heat >"$tmp/out.txt" 2>&1
check "summary shows passes" grep -q 'history: *20 forward passes' "$tmp/out.txt"
check "top experts with shares" grep -q 'layer   0: 0:25.0% 1:25.0% 2:25.0% 3:25.0%' "$tmp/out.txt"
check "layer 5 share of a rotating expert" grep -q 'layer   5: 0:25.0% 1:25.0% 2:25.0% [4-7]:6.' "$tmp/out.txt"
check "json" sh -c "'$BIN' heat --json | grep -q '\"passes\": 20'"
"$BIN" heat --svg "$tmp/map.svg" >/dev/null 2>&1
check "svg written" sh -c "head -1 '$tmp/map.svg' | grep -q '<?xml' && tail -1 '$tmp/map.svg' | grep -q '</svg>'"
check "svg has 192 cells" sh -c "[ \$(grep -c 'class=\"cell\"' '$tmp/map.svg') -eq 192 ]"

heat=$(ls "$tmp"/cache/sluice/*.heat)
head -c 100 "$heat" >"$tmp/cut" && cp "$tmp/cut" "$heat"
check "damaged file: error naming it" sh -c "'$BIN' heat 2>&1 | grep -qF '$heat ignored: size 100 bytes'"
check "damaged file: exit status 1" sh -c "! '$BIN' heat"
check "import over a damaged file replaces it" sh -c "'$BIN' heat --trace '$tmp/trace.json' 2>&1 | grep -q 'replacing it'"
check "replaced file is valid" sh -c "'$BIN' heat | grep -q 'history: *20 forward passes'"
check "reset" sh -c "'$BIN' heat --reset | grep -q '^deleted '"
check "reset again" sh -c "'$BIN' heat --reset | grep -q '^no heat file'"
check "--heat-file" sh -c "'$BIN' heat --heat-file '$tmp/x.heat' --trace '$tmp/trace.json' && [ -s '$tmp/x.heat' ]"
printf '{"n_layer": 2, "n_expert": 8, "n_expert_used": 1, "experts": [[[1],[2]]]}' >"$tmp/small.json"
check "trace of another geometry is an error" sh -c "'$BIN' heat --trace '$tmp/small.json' 2>&1 | grep -q 'trace is for 2 layers x 8 experts'"

shared=${SLUICE_SHARED:-../shared}
if [ -f "$shared/traces/tinymoe-valid-routes.json" ]; then
    check "replay with heat columns" sh -c "'$BIN' replay --trace '$shared/traces/tinymoe-valid-routes.json' --heat-from-tokens 0:4096 --slots 24 --run-len 512 | grep -q 'lfru+heat+pin'"
    check "replay with a heat file" sh -c "'$BIN' heat --heat-file '$tmp/v.heat' --trace '$shared/traces/tinymoe-valid-routes.json' --tokens 0:4096 && '$BIN' replay --trace '$shared/traces/tinymoe-valid-routes.json' --heat '$tmp/v.heat' --tokens 4096:8192 --slots 24 | grep -q 'heat from $tmp/v.heat (4096 passes'"
else
    echo "skip heat cli: replay with heat columns: ../shared not present"
fi
[ $fails -eq 0 ]
