#!/bin/sh
# Records llama.cpp's goldens under its own context defaults (f16 K/V cache,
# flash attention auto = on for the CPU) for every architecture fixture: the
# prompts, greedy lengths and top-k steps of each fixture's arch golden, run
# again through goldtool --defaults.  Writes tests/fixtures/golden-fa/
# NAME.fa.json and NAME.fa.logits.f32, which tests/test_arch.c checks in
# sluice's default KV mode (SL_KV_F16_FLASH).
#   GOLDTOOL=/path/to/goldtool   built by bench/goldtool/build.sh (required)
#   SHARED=../shared             the shared fixtures (default ../shared)
#   LLAMA_COMMIT=...             recorded in each golden (default: unknown)
#   sh bench/goldtool/record_defaults.sh [NAME...]   (default: every fixture)
set -e
: "${GOLDTOOL:?set GOLDTOOL to a goldtool built by bench/goldtool/build.sh}"
SHARED=${SHARED:-../shared}
OUT=tests/fixtures/golden-fa
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$OUT"

# NAME -> model and golden: the lean copies under tests/fixtures/lean, else ../shared
locate() {
    if [ -f "tests/fixtures/lean/models/$1.gguf" ]; then
        echo "tests/fixtures/lean/models/$1.gguf tests/fixtures/lean/golden/$1.json"
    else
        echo "$SHARED/models/arch/$1.gguf $SHARED/golden/arch/$1.json"
    fi
}

if [ $# -eq 0 ]; then
    set -- $(ls tests/fixtures/lean/models | sed 's/\.gguf$//')
    set -- "$@" $(ls "$SHARED"/models/arch/*.gguf | xargs -n1 basename | sed 's/\.gguf$//')
fi
for name in $(printf '%s\n' "$@" | sort -u); do
    set -- $(locate "$name")
    model=$1 golden=$2
    [ -f "$model" ] && [ -f "$golden" ] || { echo "skip $name: no model or golden" >&2; continue; }
    # the arch golden's prompts (as hex), greedy length and top-k steps
    python3 - "$golden" "$TMP/prompts.hex" "$TMP/shape" <<'EOF'
import json, sys
g = json.load(open(sys.argv[1]))
ps = g["prompts"]
with open(sys.argv[2], "w") as f:
    for p in ps:
        f.write(p["text"].encode("utf-8").hex() + "\n")
with open(sys.argv[3], "w") as f:
    f.write("%d %d %d\n" % (len(ps[0]["greedy"]), len(ps[0]["topk"]), len(ps[0]["topk"][0]["ids"])))
EOF
    read -r n_greedy n_steps topk <"$TMP/shape"
    "$GOLDTOOL" "$model" "$TMP/prompts.hex" "$TMP/raw.json" "$OUT/$name.fa.logits.f32" "$n_greedy" "$n_steps" \
        "$topk" --defaults 2>"$TMP/log" || { cat "$TMP/log" >&2; exit 1; }
    # the arch golden's description of the model, with llama.cpp's new outputs
    python3 - "$golden" "$TMP/raw.json" "$OUT/$name.fa.json" "$name" "${LLAMA_COMMIT:-unknown}" <<'EOF'
import json, sys
g, raw = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
for k in ("n_vocab", "add_bos", "model_desc", "settings", "system_info"):
    g[k] = raw[k]
for p, r in zip(g["prompts"], raw["prompts"]):
    text = p["text"]
    p.clear()
    p.update(r)
    p["text"] = text  # greedy_text is not re-derived: the ids are the reference
g["llama_cpp_commit"] = sys.argv[5]
g["logits_file"] = sys.argv[4] + ".fa.logits.f32"
g["recorded_by"] = "bench/goldtool/record_defaults.sh (goldtool --defaults)"
json.dump(g, open(sys.argv[3], "w"), indent=1)
EOF
    echo "recorded $name"
done
