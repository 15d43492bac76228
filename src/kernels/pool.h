/* A fixed pthread pool.  pool_run(P, N, fn, ctx) calls fn(ctx, task, thread)
 * for task in [0, N) and returns when all are done.  Tasks never share an
 * output element, so results do not depend on which thread ran what. */
#ifndef SLUICE_POOL_H
#define SLUICE_POOL_H

typedef struct sl_pool sl_pool;

/* SIMD paths.  Detection runs once (pthread_once) and never changes. */
typedef enum { SL_ISA_SCALAR = 0, SL_ISA_AVX2 = 1, SL_ISA_AVX512 = 2 } sl_isa;
sl_isa kernels_isa_detected(void);
const char *kernels_isa_name(sl_isa isa);

/* A pool carries the ISA its kernels use: the detected one by default;
 * pool_set_isa clamps to what the CPU supports (tests compare paths).
 * A NULL pool means one thread and the detected ISA. */
void pool_set_isa(sl_pool *p, sl_isa isa);
sl_isa pool_isa(const sl_pool *p);
typedef void (*sl_task_fn)(void *ctx, int task, int thread);

/* n_threads <= 0 means the number of physical cores. */
sl_pool *pool_create(int n_threads);
void pool_destroy(sl_pool *p);
int pool_threads(const sl_pool *p); /* 1 for a NULL pool */
void pool_run(sl_pool *p, int n_tasks, sl_task_fn fn, void *ctx);

/* Number of physical cores (not hyper-threads) of this machine. */
int cpu_physical_cores(void);

#endif
