#!/bin/sh
# `sluice inspect` on every GGUF the project ships and every one in ../shared
# (models, architecture fixtures, vocabularies): exits 0, and its --json
# tensor table and spine / routed-expert bytes equal an independent reading
# of the file (tests/cli/gguf_ref.py: its own parser, ggml's block sizes),
# whose data section ends where the file does.
BIN=${SLUICE_BIN:-build/sluice}
SHARED=${SLUICE_SHARED:-../shared}
if ! command -v python3 >/dev/null 2>&1; then
    echo "skip inspect cli: python3 not found (needed to read JSON)"
    exit 0
fi
fails=0
n_shared=0
for f in models/*.gguf tests/fixtures/lean/models/*.gguf "$SHARED"/models/*.gguf "$SHARED"/models/arch/*.gguf "$SHARED"/vocab/*.gguf; do
    [ -f "$f" ] || continue
    case $f in "$SHARED"/*) n_shared=$((n_shared + 1)) ;; esac
    if out=$("$BIN" inspect --json "$f" 2>&1) && printf "%s\n" "$out" | python3 -c "
import json, sys
sys.path.insert(0, 'tests/cli')
import gguf_ref
o = json.load(sys.stdin); s = o['summary']; ref = gguf_ref.read(sys.argv[1])
mine = {t['name']: t for t in o['tensors']}
assert len(mine) == len(o['tensors']) == len(ref['tensors']), 'tensor count'
for t in ref['tensors']:
    m = mine[t['name']]
    assert (m['type'].lower(), m['shape'], m['bytes']) == (t['type'], t['shape'], t['bytes']), (m, t)
    assert m['offset'] in (t['offset'], ref['data_offset'] + t['offset']), ('offset', m, t)
total = sum(t['bytes'] for t in ref['tensors'])
experts = sum(t['bytes'] for t in ref['tensors'] if '_exps' in t['name'])
assert s['total_bytes'] == total and s['expert_bytes'] == experts, 'summary bytes'
assert s['spine_bytes'] == total - experts, 'spine bytes'
assert (s['moe_layers'] > 0) == (experts > 0), 'moe layers'
# the data section ends where the file does (the last tensor padded)
if ref['tensors']:
    assert ref['data_end'] <= ref['file_size'] < ref['data_end'] + ref['alignment'], 'file size'
else:
    assert ref['file_size'] <= ref['data_offset'], 'file size'
" "$f"; then
        echo "ok inspect $f: tensors, spine + experts = an independent reading"
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
# a dense model with --mem: the inspection still printed, the budget said to have no effect
DENSE=tests/fixtures/lean/models/qwen3-dense-lean-BF16.gguf
if out=$("$BIN" inspect --mem 1G "$DENSE" 2>"${TMPDIR:-/tmp}/inspect-dense.$$") &&
    printf "%s\n" "$out" | grep -q "total tensor bytes" &&
    grep -q "has no effect: the model is dense" "${TMPDIR:-/tmp}/inspect-dense.$$"; then
    echo "ok inspect --mem on a dense model: inspection printed, nothing to stream said"
else
    echo "not ok inspect --mem on a dense model: $(head -c 300 "${TMPDIR:-/tmp}/inspect-dense.$$")"
    fails=$((fails + 1))
fi
rm -f "${TMPDIR:-/tmp}/inspect-dense.$$"
[ $fails -eq 0 ]
