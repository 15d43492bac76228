#!/bin/sh
# Runs a command (and everything it starts) inside a fresh cgroup-v1 blkio
# group that caps reads from the disk holding FILE at RATE bytes/s, so a
# streaming figure has a known ceiling that does not swing with the virtual
# disk's host cache (`sluice bench --throttle` does the same for itself;
# this is for scripts of `sluice run`, e.g. bench/draft.sh).
#   bench/blkio_run.sh RATE FILE -- COMMAND...     RATE: bytes/s, or 100M / 1G (decimal)
# Exit status is the command's; 125 if blkio cannot be used here (not root,
# no writable /sys/fs/cgroup/blkio).  Only O_DIRECT reads (sluice's uring and
# pread stores) are capped predictably: page-cache hits never reach the disk.
set -u
[ $# -ge 4 ] && [ "$3" = "--" ] || { echo "usage: $0 RATE FILE -- COMMAND..." >&2; exit 2; }
rate=$1 file=$2
shift 3
case $rate in
*G) rate=$(( ${rate%G} * 1000000000 )) ;;
*M) rate=$(( ${rate%M} * 1000000 )) ;;
*K) rate=$(( ${rate%K} * 1000 )) ;;
esac
root=/sys/fs/cgroup/blkio
[ -w "$root" ] || { echo "blkio_run: $root is not writable" >&2; exit 125; }
# the block device under FILE, and its whole disk when FILE is on a partition
d=$(stat -c '%Hd:%Ld' "$file") || exit 125
maj=${d%:*} min=${d#*:}
sys=$(readlink -f "/sys/dev/block/$maj:$min") || exit 125
[ -f "$sys/partition" ] && { read -r d <"$(dirname "$sys")/dev"; maj=${d%:*} min=${d#*:}; }
grp="$root/sluice-$$"
mkdir "$grp" 2>/dev/null || { echo "blkio_run: cannot create $grp" >&2; exit 125; }
cleanup() { echo $$ > "$root/cgroup.procs" 2>/dev/null; rmdir "$grp" 2>/dev/null; }
trap cleanup EXIT
echo "$maj:$min $rate" > "$grp/blkio.throttle.read_bps_device" || { echo "blkio_run: cannot set the cap" >&2; exit 125; }
echo "blkio_run: reads from $maj:$min capped at $rate bytes/s" >&2
( echo $(sh -c 'echo $PPID') > "$grp/cgroup.procs" && exec "$@" )
