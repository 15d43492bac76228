/* Thread pool and CPU feature detection.
 *
 * Dispatch: the job's generation, task count and next task index share one
 * 64-bit atomic word, so a worker only claims a task by a CAS that also
 * proves the job it read (fn, ctx) is still unfinished, hence current; a
 * late worker from the previous job can never run a task of the next.  Workers spin briefly on
 * the word (decode dispatches hundreds of small products per token), then
 * sleep on a condition variable.  Which thread runs a task never changes a
 * result: tasks own disjoint outputs. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/kq.h"
#include "kernels/pool.h"
#include "util/clock.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

struct sl_pool {
    int n;
    sl_isa isa;
    pthread_t *th;
    _Atomic uint64_t word; /* generation << 40 | n_tasks << 20 | next task */
    _Atomic(sl_task_fn) fn;
    _Atomic(void *) ctx;
    _Atomic int done;
    _Atomic int sleepers;
    _Atomic int stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

/* ---- CPU features ---- */

static sl_isa g_detected; /* written once under pthread_once, read-only after */
static int g_bf16;        /* AVX512_BF16 (VDPBF16PS), same */
static int g_split512;    /* 512-bit ops on 256-bit units (kq_cpu_split512), same */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__) || defined(__i386__)
static uint64_t xgetbv0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (uint64_t)hi << 32 | lo;
}

/* The AMD family (base + extended), 0 on other vendors. */
static unsigned amd_family(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d) || b != 0x68747541u) return 0; /* "Auth"enticAMD */
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    unsigned f = (a >> 8) & 0xf;
    return f == 0xf ? f + ((a >> 20) & 0xff) : f;
}

static void detect(void)
{
    unsigned a, b, c, d;
    g_detected = SL_ISA_SCALAR;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    int osxsave = (c >> 27) & 1, fma = (c >> 12) & 1, f16c = (c >> 29) & 1, avx = (c >> 28) & 1;
    if (!osxsave || !avx || !fma || !f16c) return;
    uint64_t xcr0 = xgetbv0();
    if ((xcr0 & 0x6) != 0x6) return; /* OS saves SSE and AVX state */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return;
    int avx2 = (b >> 5) & 1, bmi2 = (b >> 8) & 1;
    if (!avx2 || !bmi2) return;
    g_detected = SL_ISA_AVX2;
    int f = (b >> 16) & 1, dq = (b >> 17) & 1, bw = (b >> 30) & 1, vl = (b >> 31) & 1;
    int vnni = (c >> 11) & 1;
    if (f && dq && bw && vl && vnni && (xcr0 & 0xe0) == 0xe0) { /* opmask + zmm state */
        g_detected = SL_ISA_AVX512;
        if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) g_bf16 = (a >> 5) & 1;
        g_split512 = amd_family() == 0x19;
    }
}
#else
static void detect(void)
{
    g_detected = SL_ISA_SCALAR;
}
#endif

int kq_cpu_has_avx512bf16(void)
{
    pthread_once(&g_once, detect);
    return g_bf16;
}

int kq_cpu_split512(void)
{
    pthread_once(&g_once, detect);
    return g_split512;
}

sl_isa kernels_isa_detected(void)
{
    pthread_once(&g_once, detect);
    return g_detected;
}

const char *kernels_isa_name(sl_isa isa)
{
    switch (isa) {
    case SL_ISA_AVX512: return "avx512";
    case SL_ISA_AVX2: return "avx2";
    default: return "scalar";
    }
}

void pool_set_isa(sl_pool *p, sl_isa isa)
{
    if (!p) return;
    sl_isa max = kernels_isa_detected();
    p->isa = isa > max ? max : isa < SL_ISA_SCALAR ? SL_ISA_SCALAR : isa;
}

sl_isa pool_isa(const sl_pool *p)
{
    return p ? p->isa : kernels_isa_detected();
}

/* ---- physical cores ---- */

static int read_int(const char *path, int *out)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int ok = fscanf(f, "%d", out) == 1;
    fclose(f);
    return ok ? 0 : -1;
}

int cpu_physical_cores(void)
{
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (online < 1) online = 1;
    enum { MAXC = 4096 };
    static const int none = -1;
    int (*seen)[2] = calloc(MAXC, sizeof *seen);
    if (!seen) return (int)online;
    int n = 0;
    for (int cpu = 0; cpu < MAXC && n < MAXC; cpu++) {
        char path[128];
        int core, pkg;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/core_id", cpu);
        if (read_int(path, &core)) continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/physical_package_id", cpu);
        if (read_int(path, &pkg)) pkg = none;
        int dup = 0;
        for (int i = 0; i < n && !dup; i++) dup = seen[i][0] == core && seen[i][1] == pkg;
        if (!dup) {
            seen[n][0] = core;
            seen[n][1] = pkg;
            n++;
        }
    }
    free(seen);
    if (n < 1 || n > online) n = (int)online;
    return n;
}

/* ---- pool ---- */

#define W_GEN(w) ((uint32_t)((w) >> 40))
#define W_N(w) ((int)(((w) >> 20) & 0xfffff))
#define W_NEXT(w) ((int)((w) & 0xfffff))
#define MAX_TASKS 0xfffff

static void run_tasks(sl_pool *p, uint64_t w, int thread)
{
    uint32_t gen = W_GEN(w);
    sl_task_fn fn = atomic_load_explicit(&p->fn, memory_order_relaxed);
    void *ctx = atomic_load_explicit(&p->ctx, memory_order_relaxed);
    while (W_GEN(w) == gen && W_NEXT(w) < W_N(w)) {
        if (atomic_compare_exchange_weak(&p->word, &w, w + 1)) {
            fn(ctx, W_NEXT(w), thread);
            atomic_fetch_add(&p->done, 1);
            w = atomic_load(&p->word);
        }
    }
}

typedef struct {
    sl_pool *p;
    int id;
} worker_arg;

static void *worker(void *arg)
{
    worker_arg wa = *(worker_arg *)arg;
    free(arg);
    sl_pool *p = wa.p;
    uint32_t seen = W_GEN(atomic_load(&p->word));
    for (;;) {
        uint64_t w = atomic_load(&p->word);
        double t0 = 0.0;
        for (int spins = 0; W_GEN(w) == seen && !atomic_load(&p->stop); spins++) {
            CPU_RELAX();
            if ((spins & 255) == 255) {
                double t = sl_now();
                if (t0 == 0.0) t0 = t;
                if (t - t0 > 2e-4) break; /* ~0.2 ms of spinning, then sleep */
            }
            w = atomic_load(&p->word);
        }
        if (W_GEN(w) == seen && !atomic_load(&p->stop)) {
            atomic_fetch_add(&p->sleepers, 1);
            pthread_mutex_lock(&p->mu);
            while (W_GEN(atomic_load(&p->word)) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->cv, &p->mu);
            pthread_mutex_unlock(&p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            w = atomic_load(&p->word);
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = W_GEN(w);
        run_tasks(p, w, wa.id);
    }
}

static void wake_all(sl_pool *p)
{
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
}

sl_pool *pool_create(int n_threads)
{
    if (n_threads <= 0) n_threads = cpu_physical_cores();
    if (n_threads > 1024) n_threads = 1024;
    sl_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = n_threads;
    p->isa = kernels_isa_detected();
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->th = calloc((size_t)n_threads, sizeof *p->th);
    if (!p->th) {
        free(p);
        return NULL;
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (wa) {
            wa->p = p;
            wa->id = i;
        }
        if (!wa || pthread_create(&p->th[i], NULL, worker, wa) != 0) {
            free(wa);
            p->n = i; /* run with the threads we got */
            break;
        }
    }
    return p;
}

void pool_destroy(sl_pool *p)
{
    if (!p) return;
    atomic_store(&p->stop, 1);
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->th[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->th);
    free(p);
}

int pool_threads(const sl_pool *p)
{
    return p ? p->n : 1;
}

typedef struct {
    sl_task_fn fn;
    void *ctx;
    int base;
} offset_ctx;

static void offset_task(void *ctx, int task, int thread)
{
    offset_ctx *o = ctx;
    o->fn(o->ctx, o->base + task, thread);
}

/* Not reentrant: a task must not call pool_run on the same pool. */
void pool_run(sl_pool *p, int n_tasks, sl_task_fn fn, void *ctx)
{
    if (n_tasks <= 0) return;
    if (!p || p->n <= 1 || n_tasks == 1) {
        for (int t = 0; t < n_tasks; t++) fn(ctx, t, 0);
        return;
    }
    if (n_tasks > MAX_TASKS) { /* the word holds 20-bit counts: run in slices */
        for (int base = 0; base < n_tasks; base += MAX_TASKS) {
            offset_ctx o = {fn, ctx, base};
            pool_run(p, n_tasks - base < MAX_TASKS ? n_tasks - base : MAX_TASKS, offset_task, &o);
        }
        return;
    }
    atomic_store_explicit(&p->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&p->ctx, ctx, memory_order_relaxed);
    atomic_store(&p->done, 0);
    uint64_t gen = (W_GEN(atomic_load(&p->word)) + 1) & 0xffffff;
    uint64_t w = gen << 40 | (uint64_t)n_tasks << 20;
    atomic_store(&p->word, w);
    wake_all(p);
    run_tasks(p, w, 0);
    while (atomic_load(&p->done) < n_tasks) CPU_RELAX();
}
