/* A long streaming run: N generated tokens (default 2000) with a memory
 * budget, printing every 100 tokens the resident set (VmRSS), its peak
 * (VmHWM) and the speed of the last 100 tokens, so a leak or a slowdown
 * shows as a trend.  Uses nothing but include/sluice.h.
 *   long_run MODEL MEM_BYTES [N] [PROMPT] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sluice.h"

typedef struct {
    long n;
    double t_last;
} progress;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static long status_kib(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    size_t k = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, k)) v = atol(line + k);
    if (f) fclose(f);
    return v;
}

static int on_token(void *user, const sluice_token *t)
{
    (void)t;
    progress *p = user;
    if (++p->n % 100) return 0;
    double t1 = now();
    printf("tokens %5ld  rss %8.1f MiB  peak %8.1f MiB  %.2f tok/s\n", p->n, status_kib("VmRSS:") / 1024.0,
           status_kib("VmHWM:") / 1024.0, 100.0 / (t1 - p->t_last));
    fflush(stdout);
    p->t_last = t1;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: long_run MODEL MEM_BYTES [N] [PROMPT]\n");
        return 2;
    }
    sluice_options o = sluice_options_default();
    o.model = argv[1];
    o.mem_bytes = strtoull(argv[2], NULL, 10);
    o.n_ctx = 4096;
    o.no_heat = 1;
    long n = argc > 3 ? atol(argv[3]) : 2000;
    const char *prompt = argc > 4 ? argv[4] : "Once upon a time";
    char err[1024];
    sluice *s;
    if (sluice_open(&s, &o, err, sizeof err)) return fprintf(stderr, "long_run: %s\n", err), 1;
    sluice_sampling sp = sluice_sampling_default();
    sp.n_predict = (int32_t)n;
    sp.ignore_eos = 1;
    int32_t *ids;
    size_t n_ids;
    if (sluice_tokenize(s, prompt, strlen(prompt), 1, 0, &ids, &n_ids, err, sizeof err))
        return fprintf(stderr, "long_run: %s\n", err), 1;
    progress p = {.t_last = now()};
    sluice_callbacks cb = {.user = &p, .on_token = on_token};
    double t0 = now();
    int rc = sluice_generate_tokens(s, ids, n_ids, &sp, &cb, NULL, err, sizeof err);
    if (rc) fprintf(stderr, "long_run: %s\n", err);
    printf("total %ld tokens in %.1f s (%.2f tok/s), peak RSS %.1f MiB\n", p.n, now() - t0, p.n / (now() - t0),
           status_kib("VmHWM:") / 1024.0);
    free(ids);
    sluice_close(s);
    return rc ? 1 : 0;
}
