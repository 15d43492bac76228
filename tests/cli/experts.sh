#!/bin/sh
# Expert geometry beyond the fixtures: a synthetic model with 1,024 routed
# experts, 16 used per token (more than llama.cpp's 512 limit; Kimi K3 has
# 896), streams under budgets that force eviction and gives the in-RAM run's
# logits and ids byte for byte.
. "$(dirname "$0")/../cli_lib.sh"
need_python "cli experts tests"

E1024="$T/e1024.gguf"
if "$BIN" synth --like qwen3-30b-a3b --layers 2 --experts 1024 --used 16 --embd 64 --set n_ff_exp=32 \
        --set n_head=4 --set n_head_kv=2 --set head_dim=32 --type q8_0 --vocab "$MODEL" -o "$E1024" \
        >"$T/synth.out" 2>"$T/synth.err"; then
    ok "experts: synth writes 1,024 experts, top-16"
    grep -q "more than 512 experts: llama.cpp" "$T/synth.err" && ok "experts: synth says llama.cpp will not load it" ||
        notok "experts: synth says llama.cpp will not load it" "$(head -c 300 "$T/synth.err")"
else
    notok "experts: synth writes 1,024 experts, top-16" "$(head -c 300 "$T/synth.err")"
    exit 1
fi
P="Once upon a time there lived a king who had three daughters."
if ! gen "$E1024" "$T/ram" -n 24 -p "$P" -c 128; then
    notok "experts: 1,024 experts in RAM" "$(head -c 300 "$T/ram.err")"
    exit 1
fi
for slots in 16 40 300; do
    mem=$(budget "$E1024" $slots -c 128 -b 16)
    # shellcheck disable=SC2086
    if gen "$E1024" "$T/s" -n 24 -p "$P" -c 128 -b 16 --mem "$mem"; then
        same_run "experts: 1,024 experts streamed with $slots cached = in RAM" "$T/ram" "$T/s"
        cp "$T/s.json" "$T/s$slots.json"
    else
        notok "experts: 1,024 experts streamed with $slots cached = in RAM" "$(head -c 300 "$T/s.err")"
    fi
done
if python3 - "$T/s16.json" <<'PY'
import json, sys
o = json.load(open(sys.argv[1]))
assert o["streaming"] == 1, "not streaming"
assert o["cache_misses"] > 500, "expected eviction with 16 of 2048 experts cached, got %d misses" % o["cache_misses"]
PY
then ok "experts: the 16-slot budget forced eviction"
else notok "experts: the 16-slot budget forced eviction" "$(head -c 300 "$T/s16.json")"
fi

[ $fails -eq 0 ]
