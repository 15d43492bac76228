#!/bin/sh
# Every fuzz harness (tests/fuzz) replays its committed regression inputs
# (bugs a fuzzer found, kept fixed) and its seeds, through the same entry
# point libFuzzer calls; in the test-asan build that runs under ASan/UBSan.
. tests/cli_lib.sh
B=${BUILD:-build}
n=0
for h in tests/fuzz/fuzz_*.c; do
    name=$(basename "$h" .c)
    s=${name#fuzz_}
    bin=$B/fuzz/$name
    if [ ! -x "$bin" ]; then
        notok "fuzz replay $s" "$bin not built"
        continue
    fi
    dirs="tests/fuzz/seeds/$s"
    [ -d "tests/fuzz/regress/$s" ] && dirs="$dirs tests/fuzz/regress/$s"
    if out=$("$bin" $dirs 2>"$T/$s.err"); then
        ok "fuzz replay $s: $out (seeds and regressions)"
    else
        notok "fuzz replay $s" "$(grep -m2 -E 'ERROR|runtime error' "$T/$s.err" || tail -c 300 "$T/$s.err")"
    fi
    n=$((n + 1))
done
[ $n -gt 0 ] || notok "fuzz replay" "no harness in tests/fuzz"
[ $fails -eq 0 ]
