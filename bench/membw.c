/* Memory bandwidth of this machine, the ceiling for decode: read (AVX-512
 * or AVX2 loads, four independent accumulators) and memcpy, over a working
 * set far larger than the caches, with 4 KiB pages and with transparent huge
 * pages (madvise), for 1..N threads.  Prints one line per measurement, or
 * one JSON object with --json (bench/compare_llama.sh reads it).
 *
 *   build/membw [-w WORKSET_MB] [-t MAX_THREADS] [-r REPS] [--json] */
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

__attribute__((target("avx512f"))) static uint64_t read512(const uint8_t *p, size_t n)
{
    __m512i a = _mm512_setzero_si512(), b = a, c = a, d = a;
    for (size_t i = 0; i + 256 <= n; i += 256) {
        a = _mm512_xor_si512(a, _mm512_load_si512((const void *)(p + i)));
        b = _mm512_xor_si512(b, _mm512_load_si512((const void *)(p + i + 64)));
        c = _mm512_xor_si512(c, _mm512_load_si512((const void *)(p + i + 128)));
        d = _mm512_xor_si512(d, _mm512_load_si512((const void *)(p + i + 192)));
    }
    a = _mm512_xor_si512(_mm512_xor_si512(a, b), _mm512_xor_si512(c, d));
    return (uint64_t)_mm_cvtsi128_si64(_mm512_castsi512_si128(a));
}

__attribute__((target("avx2"))) static uint64_t read256(const uint8_t *p, size_t n)
{
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    for (size_t i = 0; i + 128 <= n; i += 128) {
        a = _mm256_xor_si256(a, _mm256_load_si256((const void *)(p + i)));
        b = _mm256_xor_si256(b, _mm256_load_si256((const void *)(p + i + 32)));
        c = _mm256_xor_si256(c, _mm256_load_si256((const void *)(p + i + 64)));
        d = _mm256_xor_si256(d, _mm256_load_si256((const void *)(p + i + 96)));
    }
    a = _mm256_xor_si256(_mm256_xor_si256(a, b), _mm256_xor_si256(c, d));
    return (uint64_t)_mm_cvtsi128_si64(_mm256_castsi256_si128(a));
}

typedef struct {
    const uint8_t *src;
    uint8_t *dst;
    size_t bytes;
    int copy, avx512;
    uint64_t sink;
    pthread_barrier_t *bar;
} part;

static void *run_part(void *arg)
{
    part *p = arg;
    pthread_barrier_wait(p->bar);
    if (p->copy) memcpy(p->dst, p->src, p->bytes);
    else p->sink = p->avx512 ? read512(p->src, p->bytes) : read256(p->src, p->bytes);
    return NULL;
}

/* GB/s of one pass over BYTES split over NT threads (best of REPS). */
static double pass(const uint8_t *src, uint8_t *dst, size_t bytes, int nt, int copy, int reps)
{
    int avx512 = __builtin_cpu_supports("avx512f");
    double best = 0;
    for (int r = 0; r < reps; r++) {
        pthread_barrier_t bar;
        pthread_barrier_init(&bar, NULL, (unsigned)nt + 1);
        part ps[64];
        pthread_t th[64];
        size_t per = (bytes / (size_t)nt) & ~(size_t)4095;
        for (int i = 0; i < nt; i++) {
            ps[i] = (part){src + per * (size_t)i, dst ? dst + per * (size_t)i : NULL, per, copy, avx512, 0, &bar};
            pthread_create(&th[i], NULL, run_part, &ps[i]);
        }
        double t0 = now();
        pthread_barrier_wait(&bar);
        for (int i = 0; i < nt; i++) pthread_join(th[i], NULL);
        double gbs = (double)per * (double)nt * (copy ? 2.0 : 1.0) / (now() - t0) / 1e9;
        if (gbs > best) best = gbs;
        pthread_barrier_destroy(&bar);
    }
    return best;
}

static uint8_t *alloc(size_t bytes, int huge)
{
    uint8_t *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    madvise(p, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    for (size_t i = 0; i < bytes; i += 4096) p[i] = (uint8_t)i; /* fault in */
    return p;
}

int main(int argc, char **argv)
{
    size_t mb = 1024;
    int max_t = 2, reps = 5, json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-w") && i + 1 < argc) mb = (size_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "-t") && i + 1 < argc) max_t = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json")) json = 1;
        else {
            fprintf(stderr, "usage: membw [-w WORKSET_MB] [-t MAX_THREADS] [-r REPS] [--json]\n");
            return 2;
        }
    }
    if (max_t < 1) max_t = 1;
    if (max_t > 64) max_t = 64;
    size_t bytes = mb << 20;
    if (json) printf("{\"workset_mb\":%zu,\"results\":[", mb);
    int first = 1;
    for (int huge = 0; huge < 2; huge++) {
        uint8_t *src = alloc(bytes, huge), *dst = alloc(bytes, huge);
        if (!src || !dst) {
            fprintf(stderr, "membw: cannot map 2 x %zu MB\n", mb);
            return 1;
        }
        for (int nt = 1; nt <= max_t; nt++) {
            double rd = pass(src, NULL, bytes, nt, 0, reps), cp = pass(src, dst, bytes, nt, 1, reps);
            if (json)
                printf("%s{\"pages\":\"%s\",\"threads\":%d,\"read_gbs\":%.2f,\"memcpy_gbs\":%.2f}", first ? "" : ",",
                       huge ? "thp" : "4k", nt, rd, cp);
            else
                printf("pages %-3s threads %d: read %6.2f GB/s, memcpy %6.2f GB/s (read + write)\n",
                       huge ? "thp" : "4k", nt, rd, cp);
            first = 0;
        }
        munmap(src, bytes);
        munmap(dst, bytes);
    }
    if (json) printf("]}\n");
    return 0;
}
