#!/bin/sh
# sluice pack from the command line: usage errors are clear, a pack of the
# bundled model is written with a summary on stdout and no progress bar when
# stderr is not a terminal, a trace picks the replicated experts, and no
# temporary files are left behind.
BIN=${SLUICE_BIN:-build/sluice}
MODEL=models/tinymoe-q8_0.gguf
TRACE=${SLUICE_SHARED:-../shared}/traces/tinymoe-valid-routes.json
T=$(mktemp -d /var/tmp/sluice-packcli-XXXXXX)
trap 'rm -rf "$T"' EXIT
mkdir -p "$T/a" "$T/b"
# never read or write the user's own heat files
XDG_CACHE_HOME="$T/nocache"
export XDG_CACHE_HOME

check() { # NAME COMMAND... : ok if COMMAND succeeds
    name=$1; shift
    if "$@" >/dev/null 2>&1; then echo "ok $name"; else echo "not ok $name"; fi
}
fails_with() { # NAME PATTERN ARGS... : sluice ARGS must fail with PATTERN on stderr
    name=$1 pat=$2; shift 2
    if "$BIN" "$@" >"$T/out" 2>"$T/err"; then echo "not ok $name: succeeded"; return; fi
    if grep -q -- "$pat" "$T/err"; then echo "ok $name"; else echo "not ok $name: stderr was: $(cat "$T/err")"; fi
}

fails_with "pack cli: no drive" "at least one --drive" pack $MODEL -o "$T/x.pack"
fails_with "pack cli: no output" "-o PACK" pack $MODEL --drive "$T/a"
fails_with "pack cli: bad fraction" "between 0 and 1" pack $MODEL --drive "$T/a" --drive "$T/b" --replicate-hot 1.5 -o "$T/x.pack"
fails_with "pack cli: replication needs two drives" "at least 2 drives" pack $MODEL --drive "$T/a" --replicate-hot 0.5 -o "$T/x.pack"
fails_with "pack cli: drive is not a directory" "not a directory" pack $MODEL --drive "$T/nope" -o "$T/x.pack"
fails_with "pack cli: unknown option" "unknown option" pack $MODEL --drive "$T/a" -o "$T/x.pack" --frobnicate
fails_with "pack cli: missing model" "cannot open\|No such file" pack "$T/none.gguf" --drive "$T/a" -o "$T/x.pack"
fails_with "pack cli: a dense model is refused by name" "a dense model has no routed experts to pack" pack models/tinydraft-f16.gguf --drive "$T/a" -o "$T/x.pack"

if "$BIN" pack $MODEL --drive "$T/a" --drive "$T/b" --replicate-hot 0.25 -o "$T/t.pack" >"$T/out" 2>"$T/err"; then
    if grep -q "192 experts" "$T/out" && grep -q "48 on two drives" "$T/out" && [ ! -s "$T/err" ]; then
        echo "ok pack cli: packs tinymoe onto two drives, summary on stdout, quiet stderr off a terminal"
    else
        echo "not ok pack cli: unexpected output: $(cat "$T/out" "$T/err")"
    fi
else
    echo "not ok pack cli: pack failed: $(cat "$T/err")"
fi
check "pack cli: drive files and manifest exist" test -s "$T/t.pack" -a -s "$T/a/t.pack.0.data" -a -s "$T/b/t.pack.1.data"
leftover=$(find "$T" -name '*.tmp' | wc -l)
if [ "$leftover" -eq 0 ]; then echo "ok pack cli: no temporary files left"; else echo "not ok pack cli: $leftover .tmp files left"; fi

if [ -f "$TRACE" ]; then
    if "$BIN" pack $MODEL --drive "$T/a" --drive "$T/b" --replicate-hot 0.1 --hot-trace "$TRACE" -o "$T/h.pack" >"$T/out" 2>"$T/err" &&
        grep -q "19 on two drives" "$T/out"; then
        echo "ok pack cli: --hot-trace replicates the hottest experts"
    else
        echo "not ok pack cli: --hot-trace: $(cat "$T/out" "$T/err")"
    fi
else
    echo "skip pack cli: --hot-trace: $TRACE not found"
fi

if "$BIN" pack --check "$T/t.pack" $MODEL >"$T/out" 2>"$T/err" && grep -q "240 of 240 record copies checked, 0 bad" "$T/out"; then
    echo "ok pack cli: --check reads every record copy of a good pack"
else
    echo "not ok pack cli: --check: $(cat "$T/out" "$T/err")"
fi
fails_with "pack cli: --check refuses another model" "another model" pack --check "$T/t.pack" models/tinydraft-f16.gguf

fails_with "pack cli: --heat names a missing file" "no such heat file" pack $MODEL --drive "$T/a" --drive "$T/b" --replicate-hot 0.1 --heat "$T/none.heat" -o "$T/x.pack"
if XDG_CACHE_HOME="$T/nocache" "$BIN" pack $MODEL --drive "$T/a" --drive "$T/b" --replicate-hot 0.1 -o "$T/u.pack" >"$T/out" 2>&1 &&
    grep -q "replicated: evenly spaced" "$T/out"; then
    echo "ok pack cli: without heat an evenly spaced fraction is replicated"
else
    echo "not ok pack cli: no heat: $(cat "$T/out")"
fi
if [ -f "$TRACE" ]; then
    if XDG_CACHE_HOME="$T/cache" "$BIN" heat --trace "$TRACE" >/dev/null 2>&1 &&
        XDG_CACHE_HOME="$T/cache" "$BIN" pack $MODEL --drive "$T/a" --drive "$T/b" --replicate-hot 0.1 -o "$T/h2.pack" >"$T/out" 2>&1 &&
        grep -q "replicated: the hottest by heat file $T/cache/sluice/" "$T/out" && grep -q "19 on two drives" "$T/out"; then
        echo "ok pack cli: the model's heat file picks the replicated experts by default"
    else
        echo "not ok pack cli: default heat: $(cat "$T/out")"
    fi
else
    echo "skip pack cli: default heat file: $TRACE not found"
fi
