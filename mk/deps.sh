#!/bin/sh
# Checks that the Debian packages sluice builds against are installed.
# As root it installs what is missing (apt-get update, then apt-get install);
# otherwise it prints the exact command and fails, so `make` never half-builds.
set -u
PKGS="gcc make pkg-config liburing-dev libpcre2-dev libutf8proc-dev libmicrohttpd-dev libjansson-dev libxxhash-dev libedit-dev"
# `sh mk/deps.sh fuzz` (make fuzz): clang's libFuzzer as well
[ "${1:-}" = fuzz ] && PKGS="$PKGS clang-14 libclang-rt-14-dev"
missing=""
for p in $PKGS; do
    st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)
    case "$st" in *"install ok installed"*) ;; *) missing="$missing $p" ;; esac
done
[ -z "$missing" ] && exit 0
echo "sluice: missing Debian packages:$missing" >&2
if [ "$(id -u)" = 0 ]; then
    echo "sluice: installing them (apt-get update && apt-get install -y$missing)" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >&2 && apt-get install -y -q $missing >&2 && exit 0
    echo "sluice: apt-get failed; install the packages above and re-run make" >&2
    exit 1
fi
echo "sluice: run:  sudo apt-get update && sudo apt-get install -y$missing" >&2
exit 1
