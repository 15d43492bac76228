#!/bin/sh
# Runs every test binary in $BUILD/tests and every tests/cli/*.sh, then prints
# the totals.  The last line is always "N passed, N failed".
BUILD=${BUILD:-build}
export SLUICE_BIN="$BUILD/sluice"
# the test build (util/fault.h): fault hooks armed by SLUICE_FAULT / SLUICE_FAULT_READ
export SLUICE_TEST_BIN="$BUILD/sluice-test"
out=$(mktemp)
# runs that stream experts record heat: keep it out of the user's cache
XDG_CACHE_HOME=$(mktemp -d)
export XDG_CACHE_HOME
trap 'rm -f "$out"; rm -rf "$XDG_CACHE_HOME"' EXIT
status=0
for t in "$BUILD"/tests/test_* tests/cli/*.sh; do
    [ -e "$t" ] || continue
    case "$t" in *.d) continue ;; esac
    echo "== $t"
    if case "$t" in *.sh) sh "$t" ;; *) "$t" ;; esac >"$out" 2>&1; then :; else
        rc=$?
        # A binary that fails without reporting a failed case (a crash, a
        # sanitizer abort) still counts as one failure.
        grep -q '^not ok ' "$out" || echo "not ok $t: exited with status $rc" >>"$out"
        status=1
    fi
    cat "$out"
    cat "$out" >>"$out.all"
done
pass=$(grep -c '^ok ' "$out.all" 2>/dev/null); pass=${pass:-0}
fail=$(grep -c '^not ok ' "$out.all" 2>/dev/null); fail=${fail:-0}
skip=$(grep -c '^skip ' "$out.all" 2>/dev/null); skip=${skip:-0}
rm -f "$out.all"
echo
[ "$skip" -gt 0 ] && echo "$skip skipped (references under ${SLUICE_SHARED:-../shared} not found or not applicable)"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ] && [ $status -eq 0 ]
