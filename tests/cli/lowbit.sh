#!/bin/sh
# The 1-3 bit types as routed experts: sluice synth --type T writes a tiny
# qwen3moe whose experts are T (the spine q4_K), and that model streamed
# under a --mem budget of 6 expert slots (4 of 16 experts used per layer, 2
# layers: every token evicts), and read from a pack, gives the logits and
# text of the in-RAM run byte for byte.  Prints the harness's ok / not ok /
# skip lines (tests/run.sh counts them).
BIN=${SLUICE_BIN:-build/sluice}
VOCAB=models/tinymoe-q8_0.gguf
T=$(mktemp -d /var/tmp/sluice-lowbit-XXXXXX)
trap 'rm -rf "$T"' EXIT
TINY="--like qwen3-30b-a3b --layers 2 --experts 16 --used 4 --embd 256 --set n_head=4 --set n_head_kv=2 --set head_dim=64 --set n_ff_exp=256 --vocab $VOCAB"
P="The old man looked at the sea and said"

check() { # NAME STATUS MESSAGE
    if [ "$2" -eq 0 ]; then echo "ok $1"; else echo "not ok $1: $3"; fi
}

if ! command -v python3 >/dev/null 2>&1; then
    echo "skip low-bit experts streamed: python3 missing"
    exit 0
fi

"$BIN" synth --like qwen3-30b-a3b --type iq2_xxs --vocab $VOCAB --dry-run >"$T/plan" 2>&1
rc=$?
grep -q "ffn_gate_exps.weight *iq2_xxs *2048 x 768 x 128 *48" "$T/plan" && grep -q "attn_k.weight *q4_K" "$T/plan" &&
    grep -q "token_embd.weight *q4_K" "$T/plan"
check "synth --type iq2_xxs: routed experts iq2_xxs, the spine q4_K" $(( rc || $? )) "$(head -c 600 "$T/plan")"

for TYPE in iq2_xxs iq1_s iq1_m iq2_xs iq2_s iq3_xxs iq3_s tq1_0 tq2_0; do
    M="$T/$TYPE.gguf"
    N=16
    [ $TYPE = iq2_xxs ] && N=40
    if ! "$BIN" synth $TINY --type $TYPE -o "$M" >"$T/out" 2>&1; then
        echo "not ok synth --type $TYPE writes a tiny qwen3moe: $(head -c 400 "$T/out")"
        continue
    fi
    MEM=$("$BIN" inspect "$M" --json --mem 4G 2>/dev/null | python3 -c 'import json, sys
p = json.load(sys.stdin)["memory_plan"]
print(p["total"] - p["cache"] - p["unused"] + 6 * p["slot_bytes"])')
    "$BIN" run -m "$M" --temp 0 -n $N -p "$P" --logits-out "$T/ram.logits" >"$T/ram.out" 2>"$T/ram.err"
    rc=$?
    "$BIN" run -m "$M" --temp 0 -n $N -p "$P" --mem "$MEM" --no-heat --stats-json "$T/st.json" \
        --logits-out "$T/mem.logits" >"$T/mem.out" 2>"$T/mem.err"
    rc2=$?
    # more expert reads than the model has experts (2 x 16): the budget evicted
    reads=$(python3 -c 'import json, sys
o = json.load(open(sys.argv[1])); print(o["cache_misses"] + o["prefetch_reads"])' "$T/st.json" 2>/dev/null)
    [ $rc -eq 0 ] && [ $rc2 -eq 0 ] && [ -n "$MEM" ] && [ -s "$T/ram.logits" ] && [ "${reads:-0}" -gt 32 ] &&
        cmp -s "$T/ram.logits" "$T/mem.logits" && cmp -s "$T/ram.out" "$T/mem.out"
    check "$TYPE experts streamed under --mem (6 slots, evicting): logits and text of the in-RAM run" $? \
        "$(head -c 400 "$T/ram.err" "$T/mem.err")"
    if [ $TYPE = iq2_xxs ] || [ $TYPE = iq1_s ] || [ $TYPE = tq1_0 ]; then
        mkdir -p "$T/a" "$T/b"
        "$BIN" pack "$M" --drive "$T/a" --drive "$T/b" -o "$T/$TYPE.pack" >"$T/pack.out" 2>&1 &&
            "$BIN" run -m "$M" --pack "$T/$TYPE.pack" --temp 0 -n $N -p "$P" --mem "$MEM" --no-heat \
                --logits-out "$T/pack.logits" >"$T/pack.run" 2>"$T/pack.err" &&
            cmp -s "$T/ram.logits" "$T/pack.logits" && cmp -s "$T/ram.out" "$T/pack.run"
        check "$TYPE experts from a two-drive pack under --mem: logits and text of the in-RAM run" $? \
            "$(head -c 400 "$T/pack.out" "$T/pack.err")"
    fi
    rm -f "$M" "$T"/*.logits
done
