#include <stdbool.h>
#include <stddef.h>
#include <sys/resource.h>

#include "decode/stats.h"

#define F(key, kind, label, unit) {#key, kind, offsetof(gen_stats, key), label, unit, 0}
#define S(key, kind, label, unit) {#key, kind, offsetof(gen_stats, key), label, unit, 1}
static const stat_field FIELDS[] = {
    F(load_s, STAT_F64, "load time", "s"),
    F(prompt_tokens, STAT_I64, "prompt tokens", ""),
    F(cached_tokens, STAT_I64, NULL, ""),
    F(generated_tokens, STAT_I64, "generated tokens", ""),
    F(prompt_s, STAT_F64, "prompt time", "s"),
    F(decode_s, STAT_F64, "generation time", "s"),
    F(decode_steps, STAT_I64, NULL, ""),
    F(prompt_tps, STAT_F64, "prompt", "tokens/s"),
    F(decode_tps, STAT_F64, "decode", "tokens/s"),
    F(ttft_s, STAT_F64, "time to first token", "s"),
    F(peak_rss_bytes, STAT_U64, "peak RSS", "bytes"),
    S(streaming, STAT_I64, NULL, ""),
    S(expert_bytes_read, STAT_U64, "expert bytes read", "bytes"),
    S(expert_bytes_per_token, STAT_F64, "expert bytes/token", "bytes"),
    S(distinct_experts, STAT_U64, "distinct experts", ""),
    S(cache_hits, STAT_U64, "cache hits", ""),
    S(cache_misses, STAT_U64, "cache misses", ""),
    S(read_retries, STAT_U64, "reads retried from a replica", ""),
    S(io_wait_s, STAT_F64, "I/O wait", "s"),
    S(compute_s, STAT_F64, "compute", "s"),
    S(read_gbps, STAT_F64, "read bandwidth", "GB/s"),
    S(prefill_read_amplification, STAT_F64, "prefill read amplification", "x"),
    S(demand_misses, STAT_U64, "demand misses", ""),
    S(prefetch_reads, STAT_U64, "prefetch reads", ""),
    S(prefetch_used, STAT_U64, "prefetch reads used", ""),
    S(prefetch_wasted_bytes, STAT_U64, "prefetch bytes wasted", "bytes"),
    S(prefetch_cancelled, STAT_U64, "prefetch reads cancelled", ""),
    S(prefetch_skipped, STAT_U64, "prefetch guesses skipped", ""),
    S(demand_reads, STAT_U64, "demand read requests", ""),
    S(demand_behind_prefetch, STAT_U64, "demand reads behind prefetch", ""),
    S(expert_bytes_loaded, STAT_U64, "expert bytes loaded", "bytes"),
    S(optimum_bytes, STAT_U64, "offline optimum bytes", "bytes"),
    S(optimum_ratio, STAT_F64, "loaded / optimum", "x"),
    S(disk_busy_fraction, STAT_F64, "disk busy", "share"),
};
#undef F
#undef S

const stat_field *stats_fields(size_t *n)
{
    *n = sizeof FIELDS / sizeof FIELDS[0];
    return FIELDS;
}

uint64_t stats_peak_rss(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (uint64_t)ru.ru_maxrss * 1024; /* Linux reports KiB */
}

void stats_finish(gen_stats *st)
{
    st->prompt_tps = st->prompt_s > 0 ? (double)st->prompt_tokens / st->prompt_s : 0;
    st->decode_tps = st->decode_s > 0 ? (double)st->decode_steps / st->decode_s : 0;
    st->peak_rss_bytes = stats_peak_rss();
}

double stats_value(const gen_stats *st, const stat_field *f)
{
    const char *p = (const char *)st + f->offset;
    switch (f->kind) {
    case STAT_I64: return (double)*(const int64_t *)p;
    case STAT_U64: return (double)*(const uint64_t *)p;
    default: return *(const double *)p;
    }
}

/* In RAM the streaming figures are not zero but absent: null, so a reader
 * cannot average a "0 bytes read" into a streaming figure.  compute_s stays:
 * compute is measured either way. */
static bool json_null_in_ram(const gen_stats *st, const stat_field *f)
{
    return f->streaming && !st->streaming && f->offset != offsetof(gen_stats, streaming) &&
           f->offset != offsetof(gen_stats, compute_s);
}

int stats_to_json(const gen_stats *st, json_t *obj)
{
    for (size_t i = 0; i < sizeof FIELDS / sizeof FIELDS[0]; i++) {
        const stat_field *f = &FIELDS[i];
        const char *p = (const char *)st + f->offset;
        json_t *v = json_null_in_ram(st, f) ? json_null()
                    : f->kind == STAT_I64 ? json_integer(*(const int64_t *)p)
                    : f->kind == STAT_U64 ? json_integer((json_int_t) * (const uint64_t *)p)
                                          : json_real(*(const double *)p);
        if (!v || json_object_set_new(obj, f->key, v)) return -1;
    }
    return 0;
}
