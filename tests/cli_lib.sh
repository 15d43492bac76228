# Sourced by the tests/cli scripts (this file is not a test itself): the
# binary, the bundled model, a scratch directory removed on exit (heat files
# go there too, never to the user's cache), and the ok / not ok / skip lines
# tests/run.sh counts.
BIN=${SLUICE_BIN:-build/sluice}
case $BIN in /*) ;; *) BIN=$(pwd)/$BIN ;; esac
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
