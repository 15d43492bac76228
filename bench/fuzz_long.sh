#!/bin/sh
# The long fuzzing runs (issue 13's goal: each harness >= 10 million
# executions or >= 2 hours with 0 crashes, leaks and UB reports):
#   sh bench/fuzz_long.sh [SECONDS] [RUNS]       (defaults 7200, 10000000)
# Each harness stops at RUNS executions or SECONDS, whichever comes first.
# The slow gguf harness (a few hundred executions a second: each input is a
# whole model header) runs on one core while the others take turns on the
# second, so the run takes about SECONDS on two cores.  Then it prints each
# harness's executions, coverage and corpus (build-fuzz/report.txt) and the
# line coverage of each parser's source file (llvm-cov, from a replay of
# the final corpus with a coverage build).
set -u
S=${1:-7200}
R=${2:-10000000}
FUZZ_ONLY=none make fuzz FUZZ_S=0 >/dev/null || exit 1 # build only
others=$(for f in tests/fuzz/fuzz_*.c; do h=$(basename "$f" .c); h=${h#fuzz_}; [ "$h" != gguf ] && printf '%s ' "$h"; done)
FUZZ_ONLY=gguf FUZZ_RUNS=$R FUZZ_REPORT=build-fuzz/report-gguf.txt make fuzz FUZZ_S="$S" >build-fuzz/long-gguf.out 2>&1 &
pid=$!
FUZZ_ONLY="$others" FUZZ_RUNS=$R FUZZ_REPORT=build-fuzz/report-rest.txt make fuzz FUZZ_S="$S" >build-fuzz/long-rest.out 2>&1
rc=$?
wait $pid || rc=1
cat build-fuzz/report-gguf.txt build-fuzz/report-rest.txt >build-fuzz/report.txt
cat build-fuzz/report.txt
# line coverage of the parsers over the final corpora: a coverage build of
# the library (clang's source-based coverage), each harness replaying its corpus
B=build-fuzz/cov
COV="-fprofile-instr-generate -fcoverage-mapping"
make -s BUILD=$B CC=clang-14 OPT=-O1 SAN=1 SANITIZE="$COV" $B/libsluice-test.a || exit 1
LIBS=$(make -s print-ldlibs)
for src in tests/fuzz/fuzz_*.c; do
    n=$(basename "$src" .c)
    h=${n#fuzz_}
    clang-14 -std=c11 -D_GNU_SOURCE -DSLUICE_TEST_FAULTS -Iinclude -Isrc -Itests/fuzz -O1 -g $COV \
        -o $B/$n "$src" tests/fuzz/driver.c $B/libsluice-test.a $LIBS || continue
    LLVM_PROFILE_FILE=$B/$h.profraw $B/$n build-fuzz/corpus/$h >/dev/null 2>&1
    llvm-profdata-14 merge -o $B/$h.profdata $B/$h.profraw || continue
    echo "== $h: line coverage of the files it parses"
    llvm-cov-14 report $B/$n -instr-profile=$B/$h.profdata |
        grep -E "gguf/gguf.c|src/tok/|chat/jinja|chat/chat.c|experts/pack.c|experts/heat.c|experts/trace.c|server/request.c|TOTAL"
done
exit $rc
