#!/bin/sh
# `sluice inspect` on every GGUF the project ships and every one in ../shared
# (models, architecture fixtures, vocabularies): exits 0, and its --json
# summary's spine + routed-expert bytes add up to the file's tensor bytes
# (summed independently from its tensor table).
BIN=${SLUICE_BIN:-build/sluice}
SHARED=${SLUICE_SHARED:-../shared}
if ! command -v python3 >/dev/null 2>&1; then
    echo "skip inspect cli: python3 not found (needed to read JSON)"
    exit 0
fi
fails=0
n_shared=0
for f in models/*.gguf "$SHARED"/models/*.gguf "$SHARED"/models/arch/*.gguf "$SHARED"/vocab/*.gguf; do
    [ -f "$f" ] || continue
    case $f in "$SHARED"/*) n_shared=$((n_shared + 1)) ;; esac
    if out=$("$BIN" inspect --json "$f" 2>&1) && printf "%s\n" "$out" | python3 -c "
import json, sys
o = json.load(sys.stdin); s = o['summary']
total = sum(t['bytes'] for t in o['tensors'])
experts = sum(t['bytes'] for t in o['tensors'] if t['expert'])
assert s['spine_bytes'] + s['expert_bytes'] == total == s['total_bytes'], 'spine + experts != tensor bytes'
assert s['expert_bytes'] == experts, 'expert bytes'
assert (s['moe_layers'] > 0) == (experts > 0), 'moe layers'
" 2>/dev/null; then
        echo "ok inspect $f: spine + experts = tensor bytes"
    else
        echo "not ok inspect $f: $(printf "%s" "$out" | head -c 200)"
        fails=$((fails + 1))
    fi
done
[ "$n_shared" -eq 0 ] && echo "skip inspect shared GGUFs: $SHARED not present"

# The plan options take llama.cpp's long forms too; a bad option is a usage error (2).
if "$BIN" inspect models/tinymoe-q8_0.gguf --json --mem 64M --ctx-size 64 --batch-size 32 --threads 1 2>&1 |
    python3 -c "
import json, sys
p = json.load(sys.stdin)['memory_plan']
assert p['n_ctx'] == 64 and p['n_batch'] == 32, p" 2>/dev/null; then
    echo "ok inspect --mem plan takes --ctx-size/--batch-size/--threads"
else
    echo "not ok inspect --mem plan takes --ctx-size/--batch-size/--threads"
    fails=$((fails + 1))
fi
"$BIN" inspect models/tinymoe-q8_0.gguf --bogus >/dev/null 2>&1
rc=$?
if [ $rc -eq 2 ]; then echo "ok inspect: unknown option exits 2"; else
    echo "not ok inspect: unknown option exits $rc, not 2"
    fails=$((fails + 1))
fi
[ $fails -eq 0 ]
