# Sourced by the tests/cli scripts (this file is not a test itself): the
# binary, the bundled model, a scratch directory removed on exit (heat files
# go there too, never to the user's cache), and the ok / not ok / skip lines
# tests/run.sh counts.
BIN=${SLUICE_BIN:-build/sluice}
case $BIN in /*) ;; *) BIN=$(pwd)/$BIN ;; esac
TBIN=${SLUICE_TEST_BIN:-build/sluice-test} # the test build: fault hooks (util/fault.h)
case $TBIN in /*) ;; *) TBIN=$(pwd)/$TBIN ;; esac
MODEL=models/tinymoe-q8_0.gguf
SHARED=${SLUICE_SHARED:-../shared}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export XDG_CACHE_HOME="$T/cache"
fails=0

ok() { echo "ok $1"; }
notok() { echo "not ok $1: $2"; fails=$((fails + 1)); }
skip() { echo "skip $1: $2"; }

# NAME: skip the whole script when python3 (used to read JSON) is missing.
need_python() {
    command -v python3 >/dev/null 2>&1 && return 0
    skip "$1" "python3 not found (needed to read JSON)"
    exit 0
}

# ---- streaming comparisons (stream.sh, experts.sh): JSON read with python3 ----

# same_run NAME REF_PREFIX OUT_PREFIX: ids and logits equal
same_run() {
    if ! cmp -s "$2.logits" "$3.logits"; then
        notok "$1" "prompt logits differ from the in-RAM run"
        return
    fi
    if python3 -c "import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); sys.exit(a['ids']!=b['ids'])" "$2.json" "$3.json"; then
        ok "$1"
    else
        notok "$1" "generated ids differ from the in-RAM run"
    fi
}

# run_model MODEL PREFIX PROMPT_ARGS... -- EXTRA: writes PREFIX.json/.logits
gen() {
    model=$1 prefix=$2; shift 2
    "$BIN" run -m "$model" --json --temp 0 --logits-out "$prefix.logits" "$@" >"$prefix.json" 2>"$prefix.err"
}

# budget MODEL SLOTS [inspect args]: a --mem (in bytes) whose cache holds
# exactly SLOTS experts, from the plan sluice itself prints
budget() {
    model=$1 slots=$2; shift 2
    "$BIN" inspect "$model" --json --mem 4G "$@" 2>/dev/null | python3 -c "
import json, sys
p = json.load(sys.stdin)['memory_plan']
print(p['total'] - p['cache'] - p['unused'] + int(sys.argv[1]) * p['slot_bytes'])" "$slots"
}
