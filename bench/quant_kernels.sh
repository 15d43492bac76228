#!/bin/sh
# Kernel speed of the 1-3 bit types (issue 12): per type, decode-shaped
# products (one token, cold weights cycling through a 1 GB working set:
# GB/s of weight bytes) and prefill-shaped ones (T = 64 and 512 tokens:
# GFLOP/s), 1 and 2 threads, on the detected SIMD path and (-a) on AVX2.
# Q4_K and IQ4_XS run alongside as the reference points of the existing
# kernels.  With a llama.cpp build (LLAMA_BIN_DIR=.../build/bin, or
# SLUICE_GGML_LIB pointing at its libggml-cpu.so), ggml's own vec_dot is
# timed on the same shapes (-g), and test-backend-ops' MUL_MAT perf mode
# runs per type.  Run on a quiet machine:
#   sh bench/quant_kernels.sh [THREADS]        (default 2)
# Output: build/bench/quant/kernels-<date>.txt
set -e
cd "$(dirname "$0")/.."
THREADS=${1:-2}
TYPES="iq1_s iq1_m iq2_xxs iq2_xs iq2_s iq3_xxs iq3_s tq1_0 tq2_0 q4_K iq4_xs"
make -j2 build/bench_kernels >/dev/null
mkdir -p build/bench/quant
OUT=build/bench/quant/kernels-$(date +%Y%m%d-%H%M).txt
G=
if [ -n "$LLAMA_BIN_DIR" ] && [ -z "$SLUICE_GGML_LIB" ] && [ -e "$LLAMA_BIN_DIR/libggml-cpu.so" ]; then
    SLUICE_GGML_LIB="$LLAMA_BIN_DIR/libggml-cpu.so"
    export SLUICE_GGML_LIB
fi
[ -n "$SLUICE_GGML_LIB" ] && G=-g
{
    echo "# $(date -u) $(uname -n), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
    echo "# build/bench_kernels -q -a $G -t $THREADS -w 1024 $TYPES"
    ./build/bench_kernels -q -a $G -t "$THREADS" -w 1024 $TYPES
    if [ -n "$LLAMA_BIN_DIR" ] && [ -x "$LLAMA_BIN_DIR/test-backend-ops" ]; then
        for t in $TYPES; do
            echo "# llama.cpp test-backend-ops perf MUL_MAT type_a=$t"
            "$LLAMA_BIN_DIR/test-backend-ops" perf -o MUL_MAT -b CPU -p "type_a=$t" 2>&1 | grep -i "MUL_MAT" || true
        done
    fi
} | tee "$OUT"
echo "written: $OUT"
