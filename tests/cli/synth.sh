#!/bin/sh
# sluice synth from the command line: plan, write, refuse.  Prints the
# harness's ok / not ok / skip lines (tests/run.sh counts them).
BIN=${SLUICE_BIN:-build/sluice}
VOCAB=models/tinymoe-q8_0.gguf
T=$(mktemp -d /tmp/sluice-synth-cli-XXXXXX)
trap 'rm -rf "$T"' EXIT
TINY="--like qwen3-30b-a3b --layers 2 --experts 8 --embd 256 --set n_head=4 --set n_head_kv=2 --set head_dim=64 --set n_ff_exp=256 --vocab $VOCAB"

ok() { echo "ok $1"; }
fail() { echo "not ok $1: $2"; }
check() { # NAME COND-EXIT-STATUS MESSAGE
    if [ "$2" -eq 0 ]; then ok "$1"; else fail "$1" "$3"; fi
}

"$BIN" synth --help >"$T/help" 2>&1
check "synth --help" $? "exit status"
grep -q -- "--route-skew" "$T/help"; check "synth --help lists --route-skew" $? "missing"

"$BIN" synth --like qwen3-30b-a3b --vocab $VOCAB --dry-run -o "$T/none.gguf" >"$T/plan" 2>&1
rc=$?
grep -q "ffn_gate_exps.weight *q4_K *2048 x 768 x 128 *48" "$T/plan" &&
    grep -q "attn_k.weight *q4_K *2048 x 512 *48" "$T/plan" &&
    grep -q "output.weight *q6_K *2048 x 50257" "$T/plan" && grep -q "^file:" "$T/plan"
check "synth --dry-run prints the qwen3-30b-a3b plan" $(( rc || $? )) "$(head -c 300 "$T/plan")"
[ ! -e "$T/none.gguf" ]; check "synth --dry-run writes nothing" $? "file written"

"$BIN" synth $TINY --route-skew 1 -o "$T/t.gguf" >"$T/out" 2>"$T/err"
rc=$?
[ $rc -eq 0 ] && [ -s "$T/t.gguf" ] && [ ! -e "$T/t.gguf.partial" ] && grep -q "GB/s" "$T/out" &&
    grep -q "synth: 100%" "$T/err"
check "synth writes a tiny model with progress and throughput" $(( rc || $? )) "$(cat "$T/err" "$T/out")"

"$BIN" inspect "$T/t.gguf" >"$T/inspect" 2>&1
rc=$?
size=$(stat -c %s "$T/t.gguf")
data=$(sed -n 's/.*total tensor bytes: .*(\([0-9]*\) bytes).*/\1/p' "$T/inspect")
first=$(awk '/^  token_embd.weight/ {print $NF}' "$T/inspect")
# tensors are packed from the data start with 32-byte alignment: size - start - data < 32 * tensors
[ $rc -eq 0 ] && [ -n "$data" ] && [ -n "$first" ] && [ $((size - first - data)) -ge 0 ] &&
    [ $((size - first - data)) -lt $((32 * 40)) ]
check "sluice inspect reads it and the bytes add up" $(( rc || $? )) "size $size, first $first, data $data"

"$BIN" synth --route-check "$T/t.gguf" >"$T/route" 2>&1
check "synth --route-check reports popularity" $? "$(cat "$T/route")"

"$BIN" synth $TINY -o "$T/t.gguf" >"$T/out" 2>&1
[ $? -ne 0 ] && grep -q "exists" "$T/out"
check "synth refuses to replace a file without --force" $? "$(cat "$T/out")"

"$BIN" synth $TINY --force -o "$T/t.gguf" >"$T/out" 2>&1
check "synth --force replaces it" $? "$(cat "$T/out")"

"$BIN" synth --like kimi-k2-scaled --layers 27 --experts 8 --vocab $VOCAB --dry-run >"$T/out" 2>&1
[ $? -ne 0 ] && grep -q "26 or 27 layers" "$T/out"
check "synth refuses a kimi shape llama.cpp takes for lite" $? "$(cat "$T/out")"

"$BIN" synth $TINY --type q2_K -o "$T/x.gguf" >"$T/out" 2>&1
[ $? -ne 0 ] && grep -q "cannot generate" "$T/out"
check "synth refuses types it cannot generate" $? "$(cat "$T/out")"

"$BIN" synth --like qwen4 -o "$T/x.gguf" >"$T/out" 2>&1
[ $? -ne 0 ] && grep -q "qwen3-30b-a3b, deepseek-v2-lite, kimi-k2-scaled" "$T/out"
check "synth lists the shapes it knows" $? "$(cat "$T/out")"

# the real Kimi-K2 shape is ~578 GB: refused unless this disk is bigger
avail=$(df -Pk "$T" | awk 'NR == 2 {print $4}')
if [ "$avail" -gt 600000000 ]; then
    echo "skip synth refuses to fill the disk: $T has more than 600 GB free"
else
    "$BIN" synth --like kimi-k2-scaled --vocab $VOCAB -o "$T/huge.gguf" >"$T/out" 2>&1
    [ $? -ne 0 ] && grep -q "free but the model needs" "$T/out" && [ ! -e "$T/huge.gguf.partial" ]
    check "synth refuses to fill the disk (statvfs)" $? "$(cat "$T/out")"
fi

# gpt-oss: the real shape's plan (mxfp4 experts, biases, sinks), and a tiny one that the engine runs
# streamed under --mem with the logits of the in-RAM run
"$BIN" synth --like gpt-oss-120b --vocab $VOCAB --dry-run >"$T/plan" 2>&1
rc=$?
grep -q "ffn_gate_exps.weight *mxfp4 *2880 x 2880 x 128 *36" "$T/plan" &&
    grep -q "attn_sinks.weight *f32 *64 *36" "$T/plan" && grep -q "ffn_down_exps.bias *f32 *2880 x 128 *36" "$T/plan"
check "synth --like gpt-oss-120b plans the real shape with mxfp4 experts" $(( rc || $? )) "$(head -c 600 "$T/plan")"
GPTOSS="--like gpt-oss-120b --layers 4 --experts 16 --embd 256 --set n_head=4 --set n_head_kv=2 --set head_dim=64 --set n_ff_exp=256 --set n_swa=8 --type q8_0 --vocab $VOCAB"
"$BIN" synth $GPTOSS -o "$T/g.gguf" >"$T/out" 2>&1
check "synth writes a tiny gpt-oss" $? "$(cat "$T/out")"
# ram_vs_mem NAME FILE: the tiny model streamed with 6 expert slots gives the
# logits and text of its in-RAM run
ram_vs_mem() {
    if ! command -v python3 >/dev/null 2>&1 || [ ! -s "$2" ]; then
        echo "skip tiny $1 under --mem: python3 or the model missing"
        return
    fi
    P="The old man looked at the sea and said"
    MEM=$("$BIN" inspect "$2" --json --mem 4G 2>/dev/null | python3 -c 'import json, sys
p = json.load(sys.stdin)["memory_plan"]
print(p["total"] - p["cache"] - p["unused"] + 6 * p["slot_bytes"])')
    "$BIN" run -m "$2" --temp 0 -n 40 -p "$P" --logits-out "$T/r-ram.logits" >"$T/r-ram.out" 2>"$T/r-ram.err"
    rc=$?
    "$BIN" run -m "$2" --temp 0 -n 40 -p "$P" --mem "$MEM" --no-heat --logits-out "$T/r-mem.logits" \
        >"$T/r-mem.out" 2>"$T/r-mem.err"
    [ $rc -eq 0 ] && [ $? -eq 0 ] && [ -n "$MEM" ] && cmp -s "$T/r-ram.logits" "$T/r-mem.logits" &&
        cmp -s "$T/r-ram.out" "$T/r-mem.out"
    check "tiny $1 streamed under --mem (6 expert slots): logits and text of the in-RAM run" $? \
        "$(head -c 400 "$T/r-mem.err")"
}
ram_vs_mem gpt-oss "$T/g.gguf"

# glm4moe: the real GLM-4.5-Air plan (46 layers without the MTP one, the first dense) and a tiny one streamed
"$BIN" synth --like glm-4.5-air --vocab $VOCAB --dry-run >"$T/plan" 2>&1
rc=$?
grep -q "ffn_gate_exps.weight *q4_K *4096 x 1408 x 128 *45" "$T/plan" &&
    grep -q "attn_q.bias *f32 *12288 *46" "$T/plan" && grep -q "exp_probs_b.bias *f32 *128 *45" "$T/plan"
check "synth --like glm-4.5-air plans the real shape" $(( rc || $? )) "$(head -c 600 "$T/plan")"
GLM="--like glm-4.5-air --layers 3 --experts 16 --used 2 --embd 256 --set n_head=4 --set n_head_kv=2 --set head_dim=64 --set n_rot=32 --set n_ff=512 --set n_ff_exp=128 --type q8_0 --vocab $VOCAB"
"$BIN" synth $GLM -o "$T/glm.gguf" >"$T/out" 2>&1
check "synth writes a tiny glm4moe" $? "$(cat "$T/out")"
ram_vs_mem glm4moe "$T/glm.gguf"
