#!/bin/sh
# `make fuzz FUZZ_S=N`: builds the library and every harness in tests/fuzz
# with clang-14's libFuzzer, ASan and UBSan (build-fuzz/), then runs each
# harness N seconds (default 60) on its corpus: build-fuzz/corpus/NAME,
# seeded from tests/fuzz/seeds, tests/fuzz/regress and, when present,
# ../shared (vocab texts, models).  Crashes land in build-fuzz/crash/; copy
# a fixed one to tests/fuzz/regress/NAME/ so `make test` replays it.
# FUZZ_ONLY="gguf jinja" runs some harnesses only; FUZZ_RUNS=N also stops a
# harness after N executions (whichever comes first); FUZZ_REPORT=FILE
# writes the summary there (two groups can then run side by side).  Exit 1
# on any crash.
set -u
FUZZ_S=${FUZZ_S:-60}
MAKE=${MAKE:-make}
B=build-fuzz
SHARED=${SLUICE_SHARED:-../shared}
sh mk/deps.sh fuzz || exit 1
SAN="-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
$MAKE -s BUILD=$B CC=clang-14 OPT=-O1 SAN=1 SANITIZE="$SAN" $B/libsluice-test.a || exit 1
LIBS=$($MAKE -s print-ldlibs)
mkdir -p $B/bin $B/crash
for src in tests/fuzz/fuzz_*.c; do
    n=$(basename "$src" .c)
    [ $B/bin/$n -nt "$src" ] && [ $B/bin/$n -nt $B/libsluice-test.a ] && continue
    clang-14 -std=c11 -D_GNU_SOURCE -DSLUICE_TEST_FAULTS -Iinclude -Isrc -Itests/fuzz -g -O1 \
        -fsanitize=fuzzer,address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined \
        -o $B/bin/$n "$src" $B/libsluice-test.a $LIBS || exit 1
done

# extra seeds from the shared references and the fixtures, made once
seed_extra() {
    c=$B/corpus/$1
    [ -d "$c" ] && return
    mkdir -p "$c"
    case $1 in
    gguf) for f in tests/fixtures/lean/models/*.gguf models/tinydraft-f16.gguf; do
              [ -f "$f" ] && head -c 262144 "$f" >"$c/$(basename "$f")"; done ;;
    tokenizer) i=0
        for f in "$SHARED"/vocab/*.inp; do
            [ -f "$f" ] || continue
            head -c 4000 "$f" | split -l 20 - "$c/inp$i-"
            i=$((i + 1))
        done
        for f in "$c"/inp*; do [ -f "$f" ] && { printf '\001\000'; cat "$f"; } >"$f.s" && rm "$f"; done ;;
    esac
}

status=0
report=${FUZZ_REPORT:-$B/report.txt}
runs=""
[ -n "${FUZZ_RUNS:-}" ] && runs=-runs=$FUZZ_RUNS
: >"$report"
for src in tests/fuzz/fuzz_*.c; do
    n=$(basename "$src" .c)
    h=${n#fuzz_}
    case " ${FUZZ_ONLY:-$h} " in *" $h "*) ;; *) continue ;; esac
    seed_extra "$h"
    mkdir -p $B/corpus/$h tests/fuzz/regress/$h
    dict=""
    case $h in gguf) dict=-dict=tests/fuzz/gguf.dict ;; jinja) dict=-dict=tests/fuzz/jinja.dict ;;
               request) dict=-dict=tests/fuzz/json.dict ;; esac
    maxlen=65536
    [ "$h" = gguf ] && maxlen=262144
    log=$B/$h.log
    echo "== fuzz $h ($FUZZ_S s)"
    ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1 \
        $B/bin/$n -max_total_time="$FUZZ_S" $runs -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
        -max_len=$maxlen $dict -artifact_prefix=$B/crash/$h- \
        $B/corpus/$h tests/fuzz/seeds/$h tests/fuzz/regress/$h >"$log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
    line="$h: exit $rc, ${execs:-?} executions, ${cov:-cov: ?}, corpus $(ls $B/corpus/$h | wc -l) files"
    echo "$line" | tee -a "$report"
    if [ $rc -ne 0 ]; then
        status=1
        grep -m3 -E "ERROR|runtime error|SUMMARY" "$log"
    fi
done
echo "report: $report; crashes: $(ls $B/crash | wc -l) files in $B/crash"
exit $status
