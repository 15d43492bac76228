#!/bin/sh
# Faults around packs, through the test build's hooks (util/fault.h): a pack
# write that fails leaves no pack that looks whole; a failed read of a pack
# record (on either drive, replicated or not) is an error naming the drive
# file and offset, while EINTR and short reads are retried to the same text;
# a drive directory that vanished and a damaged record are named.
. tests/cli_lib.sh
P="The old man"
D="--drive $T/a --drive $T/b --replicate-hot 0.25"
mkdir -p "$T/a" "$T/b"
if ! "$BIN" pack $MODEL $D -o "$T/good.pack" >/dev/null 2>"$T/err"; then
    notok "faults pack: reference pack" "$(cat "$T/err")"
    exit 1
fi
want=$("$BIN" run -m $MODEL --temp 0 -n 8 -p "$P" 2>/dev/null)

# pack_fault SPEC: pack under SLUICE_FAULT=SPEC into its own drives
pack_fault() {
    rm -rf "$T/fa" "$T/fb" "$T/f.pack"
    mkdir -p "$T/fa" "$T/fb"
    SLUICE_FAULT=$1 "$TBIN" pack $MODEL --drive "$T/fa" --drive "$T/fb" --replicate-hot 0.25 -o "$T/f.pack" \
        >/dev/null 2>"$T/f.err"
}

for spec in write:1:ENOSPC write:4:EIO write:7:ENOSPC fsync:1:EIO rename:1:EIO; do
    pack_fault $spec
    rc=$?
    left=$(find "$T/fa" "$T/fb" "$T" -maxdepth 1 -name '*.tmp*' | wc -l)
    if [ $rc -ne 0 ] && [ ! -e "$T/f.pack" ] && [ "$left" -eq 0 ] && grep -q "$T/f" "$T/f.err"; then
        ok "faults pack: $spec while packing: an error naming the file, no manifest, no temporary left"
    else
        notok "faults pack: $spec while packing" "exit $rc, manifest $(test -e "$T/f.pack" && echo left), $left temporaries: $(head -c 300 "$T/f.err")"
    fi
done
for spec in write:3:EINTR write:5:short; do
    pack_fault $spec
    rc=$?
    got=$("$BIN" run -m $MODEL --pack "$T/f.pack" --mem 64M --temp 0 -n 8 -p "$P" 2>/dev/null)
    if [ $rc -eq 0 ] && "$BIN" pack --check "$T/f.pack" $MODEL >/dev/null 2>&1 && [ "$got" = "$want" ]; then
        ok "faults pack: $spec while packing is retried: the pack checks and decodes the same text"
    else
        notok "faults pack: $spec while packing is retried" "exit $rc: $(head -c 300 "$T/f.err")"
    fi
done

# reads of a packed run (pread, so every record read is a counted read)
RUN="run -m $MODEL --pack $T/good.pack --mem 64M --io pread --prefetch off --no-heat --temp 0 -n 8 -p"
got=$("$BIN" $RUN "$P" 2>/dev/null)
[ "$got" = "$want" ] && ok "faults pack: the packed run decodes the in-RAM text" ||
    notok "faults pack: the packed run decodes the in-RAM text" "$got"
# the first read that is an expert record's (the spine and the drive
# headers come first), then faults on it and on later ones: EIO is an error
# naming the drive file and offset, or (a replicated expert) read again from
# its other copy, said in read_retries; EINTR and short reads are retried
first=0 n=60
while [ $n -le 600 ] && [ $first -eq 0 ]; do
    SLUICE_FAULT=read:$n:EIO "$TBIN" $RUN "$P" >/dev/null 2>"$T/r.err"
    grep -q "good.pack.[01].data: read of expert" "$T/r.err" && first=$n
    n=$((n + 5))
done
[ $first -gt 0 ] && ok "faults pack: an expert record's read fails at read $first" ||
    notok "faults pack: no read from 60 to 600 was an expert record's" "$(head -c 300 "$T/r.err")"
for n in $first $((first + 1)) $((first + 2)) $((first + 3)) $((first + 17)) $((first + 40)); do
    [ $first -gt 0 ] || break
    SLUICE_FAULT=read:$n:EIO "$TBIN" $RUN "$P" --stats-json "$T/r.json" >"$T/r.out" 2>"$T/r.err"
    rc=$?
    if [ $rc -ne 0 ] && grep -q "good.pack.[01].data: read of expert [0-9]* of layer [0-9]* at offset [0-9]*.*Input/output error" "$T/r.err"; then
        ok "faults pack: EIO on read $n of a packed run names the drive file, expert and offset"
    elif [ $rc -eq 0 ] && [ "$(cat "$T/r.out")" = "$want" ] &&
        python3 -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["read_retries"] < 1)' "$T/r.json"; then
        ok "faults pack: EIO on read $n (a replicated expert) is read from the other copy: same text, read_retries counted"
    else
        notok "faults pack: EIO on read $n of a packed run" "exit $rc: $(head -c 300 "$T/r.err")"
    fi
    for kind in EINTR short; do
        got=$(SLUICE_FAULT=read:$n:$kind "$TBIN" $RUN "$P" 2>"$T/r.err")
        [ $? -eq 0 ] && [ "$got" = "$want" ] && ok "faults pack: $kind on read $n is retried, the same text" ||
            notok "faults pack: $kind on read $n is retried" "$(head -c 300 "$T/r.err")"
    done
done

# every expert on both drives: a failed read is always read again from the other copy
mkdir -p "$T/ra" "$T/rb"
"$BIN" pack $MODEL --drive "$T/ra" --drive "$T/rb" --replicate-hot 1 -o "$T/r.pack" >/dev/null 2>"$T/err" ||
    notok "faults pack: fully replicated pack" "$(cat "$T/err")"
RRUN="run -m $MODEL --pack $T/r.pack --mem 64M --io pread --prefetch off --no-heat --temp 0 -n 8 -p"
for n in $first $((first + 9)) $((first + 30)); do
    [ $first -gt 0 ] || break
    got=$(SLUICE_FAULT=read:$n:EIO "$TBIN" $RRUN "$P" --stats-json "$T/rr.json" 2>"$T/rr.err")
    if [ $? -eq 0 ] && [ "$got" = "$want" ] &&
        python3 -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["read_retries"] != 1)' "$T/rr.json"; then
        ok "faults pack: EIO on read $n of a fully replicated pack: the other copy, same text, one retry counted"
    else
        notok "faults pack: EIO on read $n of a fully replicated pack" "$(head -c 300 "$T/rr.err")"
    fi
done

# a drive directory gone before the run
mv "$T/b" "$T/b.gone"
"$BIN" $RUN "$P" >/dev/null 2>"$T/v.err"
rc=$?
mv "$T/b.gone" "$T/b"
if [ $rc -ne 0 ] && grep -q "$T/b/good.pack.1.data" "$T/v.err"; then
    ok "faults pack: a vanished drive directory is an error naming the missing file"
else
    notok "faults pack: a vanished drive directory" "exit $rc: $(head -c 300 "$T/v.err")"
fi

# flipped bytes at 16 places of drive 0 (some land in records' padding,
# which no one reads): --check and sluice check --pack name the damage
cp "$T/a/good.pack.0.data" "$T/a0.bak"
size=$(wc -c <"$T/a/good.pack.0.data")
python3 - "$T/a/good.pack.0.data" "$size" <<'PY' || exit 1
import sys
size = int(sys.argv[2])
with open(sys.argv[1], "r+b") as f:
    for i in range(1, 17):
        at = size * i // 17
        f.seek(at); b = f.read(1); f.seek(at); f.write(bytes([b[0] ^ 0x40]))
PY
"$BIN" pack --check "$T/good.pack" $MODEL >"$T/c.out" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "good.pack.0.data.*checksum mismatch" "$T/c.out" && grep -q " [1-9][0-9]* bad" "$T/c.out"; then
    ok "faults pack: pack --check finds the damaged records and names the drive file"
else
    notok "faults pack: pack --check on a damaged record" "exit $rc: $(head -c 400 "$T/c.out")"
fi
"$BIN" check $MODEL --pack "$T/good.pack" >"$T/c2.out" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -q "good.pack.0.data" "$T/c2.out"; then
    ok "faults pack: sluice check --pack fails on the damaged record, naming the file"
else
    notok "faults pack: sluice check --pack on a damaged record" "exit $rc: $(head -c 400 "$T/c2.out")"
fi
cp "$T/a0.bak" "$T/a/good.pack.0.data"
[ $fails -eq 0 ]
