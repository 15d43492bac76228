#!/bin/sh
# Runs a command inside a fresh cgroup-v1 memory group with a hard limit that
# also counts page cache, then prints the group's peak usage.
#   bench/cgrun.sh LIMIT_BYTES [--drop-caches] -- COMMAND...
# Exit status is the command's; 125 if cgroups are not usable here (not root,
# no writable /sys/fs/cgroup/memory): callers skip then.
set -u
limit=$1; shift
drop=0
[ "${1:-}" = "--drop-caches" ] && { drop=1; shift; }
[ "${1:-}" = "--" ] && shift
root=/sys/fs/cgroup/memory
[ -w "$root" ] || { echo "cgrun: $root is not writable" >&2; exit 125; }
grp="$root/sluice-$$"
mkdir "$grp" 2>/dev/null || { echo "cgrun: cannot create $grp" >&2; exit 125; }
cleanup() { echo $$ > "$root/cgroup.procs" 2>/dev/null; rmdir "$grp" 2>/dev/null; }
trap cleanup EXIT
echo "$limit" > "$grp/memory.limit_in_bytes" || { echo "cgrun: cannot set limit" >&2; exit 125; }
# no swap on these machines; if memsw exists, cap it too so nothing escapes
[ -w "$grp/memory.memsw.limit_in_bytes" ] && echo "$limit" > "$grp/memory.memsw.limit_in_bytes" 2>/dev/null
[ "$drop" = 1 ] && { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null; }
# run the command as a child inside the group so this shell can read the peak
( echo $(sh -c 'echo $PPID') > "$grp/cgroup.procs" && exec "$@" )
rc=$?
oom=$(awk '$1 == "oom_kill" {print $2}' "$grp/memory.oom_control")
echo "cgrun: limit $limit bytes, peak $(cat "$grp/memory.max_usage_in_bytes") bytes, failcnt $(cat "$grp/memory.failcnt"), oom_kill ${oom:-0}" >&2
exit $rc
