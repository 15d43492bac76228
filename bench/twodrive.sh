#!/bin/sh
# Two drives of known rates (issue 15): two loop devices (losetup
# --direct-io=on, ext4, 10 GB each) in one blkio cgroup that throttles
# reads from them to 300 and 600 MB/s; the 17 GB synthetic model packed
# across them (without replicas, and with --replicate-hot 0.2) and decoded
# at --mem file/3.  Prints each drive's bytes, busy share, rate and
# replicated share from --stats-json, the aggregate rate over the run, and the bound the
# placement allows: the rate at which the slowest drive finishes its fixed
# share, replicated bytes assigned optimally (goal: aggregate >= 90% of it).
#   sh bench/twodrive.sh   (root only; needs 2 x 10 GB free in $IMG_DIR)
#   MODEL=/work/big/q30b-q4k.gguf IMG_DIR=/var/tmp/sluice-2drive NGEN=24
set -u
BIN=${SLUICE_BIN:-build/sluice}
case $BIN in /*) ;; *) BIN=$(pwd)/$BIN ;; esac
MODEL=${MODEL:-/work/big/q30b-q4k.gguf}
IMG=${IMG_DIR:-/var/tmp/sluice-2drive}
NGEN=${NGEN:-24}
[ "$(id -u)" = 0 ] || { echo "twodrive: needs root (loop devices, blkio)"; exit 0; }
CG=/sys/fs/cgroup/blkio/sluice-2drive-$$
mkdir -p "$IMG/m0" "$IMG/m1" "$CG" || exit 1
loops=""
cleanup() {
    echo $$ > /sys/fs/cgroup/blkio/cgroup.procs 2>/dev/null
    rmdir "$CG" 2>/dev/null
    for i in 0 1; do umount "$IMG/m$i" 2>/dev/null; done
    for l in $loops; do losetup -d "$l" 2>/dev/null; done
    rm -f "$IMG/d0.img" "$IMG/d1.img"
}
trap cleanup EXIT
i=0
for rate in 300000000 600000000; do
    truncate -s 10G "$IMG/d$i.img"
    l=$(losetup --direct-io=on -f --show "$IMG/d$i.img") || exit 1
    loops="$loops $l"
    mkfs.ext4 -q "$l" && mount "$l" "$IMG/m$i" || exit 1
    echo "$(lsblk -dno MAJ:MIN "$l" | tr -d ' ') $rate" > "$CG/blkio.throttle.read_bps_device" || exit 1
    i=$((i + 1))
done
size=$(stat -c %s "$MODEL")
for rep in 0 0.2; do
    rm -rf "$IMG/m0/pack" "$IMG/m1/pack"
    mkdir -p "$IMG/m0/pack" "$IMG/m1/pack"
    "$BIN" pack "$MODEL" --drive "$IMG/m0/pack" --drive "$IMG/m1/pack" --replicate-hot "$rep" \
        -o "$IMG/m0/model.pack" >/dev/null || { echo "pack failed"; continue; }
    sync; echo 3 > /proc/sys/vm/drop_caches
    # only the run joins the group (echo $$ in a ( ) subshell moved the
    # script instead, so the first run went unthrottled)
    sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$CG" \
        "$BIN" run -m "$MODEL" --pack "$IMG/m0/model.pack" --mem $((size / 3)) -t 2 --temp 0 -n "$NGEN" \
        --no-heat -p "The ferry left the harbour a little after six" --stats-json "$IMG/stats-$rep.json" >/dev/null
    python3 - "$IMG/stats-$rep.json" "$rep" <<'PY'
import json, sys
s = json.load(open(sys.argv[1])); d = s.get("drives", [])
rates = [300e6, 600e6]
for x in d:
    print("  drive %d: %6.0f MB (%4.1f%%), %d requests, busy %4.1f%%, %4.0f MB/s while busy, measured %4.0f MB/s, replicated %4.1f%%" % (
        x["drive"], x["bytes"] / 1e6, 100 * x["share"], x["requests"], 100 * x["busy_fraction"],
        x["rate_while_busy"] / 1e6, x["measured_rate"] / 1e6, 100 * x["flexible_share"]))
# over the run's wall time (prompt + decode): a drive's busy time counts
# only reads at the device, and blkio hands a drive idle for a while a
# slice's worth of bytes at once, so busy times flatter the drives
tot = sum(x["bytes"] for x in d); t = s.get("prompt_s", 0) + s.get("decode_s", 0)
fixed = [x["bytes"] - x["flexible_bytes"] for x in d]; flex = sum(x["flexible_bytes"] for x in d)
# bound: time T at which both drives finish their fixed bytes plus an optimal split of the flexible ones
T = max(max(f / r for f, r in zip(fixed, rates)), (sum(fixed) + flex) / sum(rates))
bound = tot / T if T > 0 else 0
agg = tot / t if t > 0 else 0
print("replicate-hot %s: decode %.3f tok/s; aggregate %.0f MB/s over %.1f s (prompt + decode); placement bound %.0f MB/s: %.0f%%" % (
    sys.argv[2], s.get("decode_tps", 0), agg / 1e6, t, bound / 1e6, 100 * agg / bound if bound else 0))
PY
done
