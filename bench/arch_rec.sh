#!/bin/sh
# Issue 11, the recurrent architectures (kimi-linear, qwen35moe): the figures
# of the closing note.  Run on a quiet machine; every part prints its table.
#
#   sh bench/arch_rec.sh [parity] [ram] [rollback] [stream]     (default: all four)
#
# parity    tiny synthetic models of both shapes (Q8_0 / Q4_K, written in a
#           temp dir): sluice's last-prompt logits (--kv f32) against
#           llama.cpp's (goldtool, f32 KV, no flash attention), max|d|/R per
#           prompt.  Needs GOLDTOOL (default /work/goldtool).
# ram       in RAM against llama.cpp, real widths scaled to fit:
#           kimi-linear-48b-a3b --layers 8 and qwen3.5-35b-a3b --layers 12,
#           Q4_K, all 256 experts; bench/compare_llama.sh -p 512 -n 128
#           (alternating rounds, medians).  Goal: >= 1.0x decode, >= 0.8x prefill.
# rollback  bench_rollback on the kimi-linear --layers 8 model: a K+1-token
#           verification with and without the state snapshots, a rewind, and
#           the recompute alternative (restore + re-evaluate j tokens).
# stream    kimi-linear-48b-a3b at all 27 layers (27.7 GB at Q4_K) under
#           --mem $MEM (9G: about 3x): bench/stream.sh (decode with io_uring /
#           pread / mmap, the I/O bound from the disk probe, 512-token prefill
#           read amplification), then llama-bench (mmap, the page cache is all
#           it has) under the same cgroup limit.
#
# env: BIG (models, default /work/big; made under flock $BIG/.lock and reused
#      by name), LLAMA_BIN_DIR (default /work/llama.cpp/build/bin), MEM (9G),
#      THREADS (2), OUT (build/bench/arch_rec)
set -u
cd "$(dirname "$0")/.."
BIN=${SLUICE_BIN:-build/sluice}
BIG=${BIG:-/work/big}
LLAMA_BIN_DIR=${LLAMA_BIN_DIR:-/work/llama.cpp/build/bin}
GOLDTOOL=${GOLDTOOL:-/work/goldtool}
MEM=${MEM:-9G}
THREADS=${THREADS:-2}
OUT=${OUT:-build/bench/arch_rec}
PARTS=${*:-parity ram rollback stream}
mkdir -p "$OUT"
[ -x "$BIN" ] || { echo "arch_rec: $BIN not built (run make)" >&2; exit 1; }

# synth LIKE FILE ARGS...: the model in $BIG unless it is there already
synth() {
    like=$1 file=$2
    shift 2
    [ -f "$BIG/$file" ] && return 0
    echo "== writing $BIG/$file (sluice synth --like $like $*)"
    flock "$BIG/.lock" "$BIN" synth --like "$like" "$@" -o "$BIG/$file" || exit 1
}

parity() {
    echo "== parity with llama.cpp on tiny synthetic models (logits after the prompt, --kv f32)"
    [ -x "$GOLDTOOL" ] || { echo "   skipped: $GOLDTOOL not built (shared/tools/goldtool/build.sh)"; return; }
    tmp=$(mktemp -d)
    KIMI="--layers 4 --experts 8 --used 2 --set n_embd=256 --set n_head=4 --set ssm_groups=4 --set ssm_vheads=4
          --set ssm_state=64 --set kv_lora=64 --set qk_nope=32 --set qk_rope=32 --set v_head=32 --set n_ff=512
          --set n_ff_exp=256"
    Q35="--layers 4 --experts 8 --used 2 --set n_embd=256 --set n_head=4 --set n_head_kv=2 --set head_dim=64
         --set n_rot=16 --set ssm_groups=2 --set ssm_vheads=4 --set ssm_state=64 --set n_ff_exp=256 --set n_ff_shexp=256"
    printf 'ids:464,1468,582,3114,379,262,5417,290,531\nids:15496,11,616,1438,318,1757,13,314,1101,257,922,286,262\nids:40,1842,284,4483,546\n' >"$tmp/p.hex"
    for spec in "kimi-linear-48b-a3b:q8_0:$KIMI" "kimi-linear-48b-a3b:q4_K:$KIMI" "qwen3.5-35b-a3b:q8_0:$Q35" \
                "qwen3.5-35b-a3b:q4_K:$Q35"; do
        like=${spec%%:*} rest=${spec#*:} type=${rest%%:*} args=${rest#*:}
        m="$tmp/$like-$type.gguf"
        # shellcheck disable=SC2086
        "$BIN" synth --like "$like" $args --type "$type" --vocab models/tinymoe-q8_0.gguf -o "$m" >/dev/null 2>&1 || {
            echo "   $like $type: synth failed"; continue; }
        LD_LIBRARY_PATH=$LLAMA_BIN_DIR "$GOLDTOOL" "$m" "$tmp/p.hex" "$tmp/g.json" "$tmp/g.f32" 1 1 1 >/dev/null 2>&1 || {
            echo "   $like $type: llama.cpp failed to load or run it"; continue; }
        for i in 0 1 2; do
            ids=$(sed -n "$((i + 1))p" "$tmp/p.hex" | cut -d: -f2)
            "$BIN" run -m "$m" --prompt-ids "$ids" -n 1 --temp 0 --kv f32 -t "$THREADS" --logits-out "$tmp/s$i.f32" \
                >/dev/null 2>&1 || echo "   $like $type prompt $i: sluice failed"
        done
        python3 - "$tmp" "$like $type" <<'EOF'
import struct, sys
d, name = sys.argv[1], sys.argv[2]
g = open(d + '/g.f32', 'rb').read()
n = len(g) // 12
out = []
for i in range(3):
    a = struct.unpack('%df' % n, g[4 * n * i:4 * n * (i + 1)])
    b = struct.unpack('%df' % n, open('%s/s%d.f32' % (d, i), 'rb').read())
    r = max(a) - min(a)
    out.append('%.2g' % (max(abs(x - y) for x, y in zip(a, b)) / r))
print('   %-26s max|d|/R per prompt: %s' % (name, ', '.join(out)))
EOF
    done
    rm -rf "$tmp"
}

ram() {
    synth kimi-linear-48b-a3b kimi-linear-l8-q4k.gguf --layers 8 --type q4_K
    synth qwen3.5-35b-a3b qwen35-l12-q4k.gguf --layers 12 --type q4_K
    echo "== in RAM vs llama.cpp (pp512 / tg128, $THREADS threads)"
    OUT=$OUT/compare LLAMA_BIN_DIR=$LLAMA_BIN_DIR sh bench/compare_llama.sh -p 512 -n 128 -t "$THREADS" -r 3 -R 2 \
        "$BIG/kimi-linear-l8-q4k.gguf" "$BIG/qwen35-l12-q4k.gguf"
}

rollback() {
    synth kimi-linear-48b-a3b kimi-linear-l8-q4k.gguf --layers 8 --type q4_K
    make -s build/bench_rollback || return
    echo "== rollback cost (K = 4)"
    build/bench_rollback "$BIG/kimi-linear-l8-q4k.gguf" -t "$THREADS" -k 4 -r 15
}

stream() {
    synth kimi-linear-48b-a3b kimi-linear-q4k.gguf --type q4_K
    echo "== streaming kimi-linear-48b-a3b (27 layers) under --mem $MEM"
    MEM=$MEM THREADS=$THREADS OUT=$OUT/stream sh bench/stream.sh "$BIG/kimi-linear-q4k.gguf"
    if [ -x "$LLAMA_BIN_DIR/llama-bench" ]; then
        bytes=$(python3 -c "
import re, sys
m = re.fullmatch(r'([0-9.]+)([KMGT]?)', sys.argv[1]); u = {'': 1, 'K': 1 << 10, 'M': 1 << 20, 'G': 1 << 30, 'T': 1 << 40}
print(int(float(m.group(1)) * u[m.group(2)]) + (256 << 20))" "$MEM")
        echo "== llama.cpp, same cgroup limit ($bytes bytes), mmap, tg16"
        sh bench/cgrun.sh "$bytes" --drop-caches -- "$LLAMA_BIN_DIR/llama-bench" -m "$BIG/kimi-linear-q4k.gguf" \
            -p 0 -n 16 -r 1 -t "$THREADS" -o md 2>&1 | grep -E '^\|'
    fi
}

for p in $PARTS; do
    case "$p" in
    parity) parity ;;
    ram) ram ;;
    rollback) rollback ;;
    stream) stream ;;
    *) echo "arch_rec: unknown part $p (parity ram rollback stream)" >&2; exit 2 ;;
    esac
done
