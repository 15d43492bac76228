#!/bin/sh
# sluice check: a sound model passes; a NaN written into a float tensor and
# an infinite scale written into a q8_0 block (ggml's block layout: an f16
# scale then 32 int8) are reported by tensor, row and block; a flipped byte
# in a pack's drive file fails the checksum check.
. tests/cli_lib.sh
need_python
M=tests/fixtures/lean/models/llama-gqa-lean-Q8_0.gguf
[ -f "$M" ] || { skip "check" "$M not found"; exit 0; }
"$BIN" check -q "$M" >"$T/ok.out" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "^OK" "$T/ok.out" && grep -q "29 tensors" "$T/ok.out"; then
    ok "check: a sound model passes, every tensor read"
else
    notok "check: a sound model passes, every tensor read" "exit $rc: $(head -c 300 "$T/ok.out")"
fi
# offsets from the tensor table (absolute, as inspect prints them)
off() { "$BIN" inspect "$M" | awk -v n="$1" '$1 == n { print $NF }'; }
poke() { # FILE OFFSET HEXBYTES
    python3 -c 'import sys; p,o,b=sys.argv[1],int(sys.argv[2]),bytes.fromhex(sys.argv[3]); f=open(p,"r+b"); f.seek(o); f.write(b)' "$@"
}
cp "$M" "$T/nan.gguf"
poke "$T/nan.gguf" $(( $(off output_norm.weight) + 4 * 3 )) 0000c07f # f32 NaN at element 3
"$BIN" check -q "$T/nan.gguf" >"$T/nan.out" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "tensor output_norm.weight: row 0, block 3: element 3 decodes to NaN" "$T/nan.out"; then
    ok "check: a NaN in a float tensor names the tensor, row, block and element"
else
    notok "check: a NaN in a float tensor names the tensor, row, block and element" "exit $rc: $(head -c 300 "$T/nan.out")"
fi
cp "$M" "$T/inf.gguf"
# token_embd: rows of 64 q8_0 values = 2 blocks of 34 bytes; row 2, block 1's scale := f16 +inf
poke "$T/inf.gguf" $(( $(off token_embd.weight) + 2 * 68 + 34 )) 007c
"$BIN" check -q "$T/inf.gguf" >"$T/inf.out" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "tensor token_embd.weight: row 2, block 1: element 32 decodes to" "$T/inf.out"; then
    ok "check: an infinite q8_0 scale names the tensor, row and block"
else
    notok "check: an infinite q8_0 scale names the tensor, row and block" "exit $rc: $(head -c 300 "$T/inf.out")"
fi
# a pack with one flipped byte in a record
X=tests/fixtures/lean/models/llama-mixtral-lean-Q4_0.gguf
mkdir -p "$T/d1" "$T/d2"
if "$BIN" pack "$X" --drive "$T/d1" --drive "$T/d2" -o "$T/x.pack" --buffered >/dev/null 2>"$T/pack.err"; then
    "$BIN" check -q "$X" --pack "$T/x.pack" >"$T/p1.out" 2>&1
    rc1=$?
    f=$(ls "$T"/d1/*.data | head -1)
    poke "$f" 8192 ff
    "$BIN" check -q "$X" --pack "$T/x.pack" >"$T/p2.out" 2>&1
    rc2=$?
    if [ $rc1 -eq 0 ] && [ $rc2 -eq 1 ] && grep -q "1 bad" "$T/p2.out" && grep -q "first bad copy" "$T/p2.out"; then
        ok "check --pack: every checksum verified, a flipped byte is reported"
    else
        notok "check --pack: every checksum verified, a flipped byte is reported" "exit $rc1/$rc2: $(head -c 300 "$T/p2.out")"
    fi
else
    notok "check --pack: every checksum verified, a flipped byte is reported" "pack: $(head -c 300 "$T/pack.err")"
fi
[ $fails -eq 0 ]
