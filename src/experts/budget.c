#include "experts/budget.h"

#include <stdio.h>

/* Measured on the bundled model: the binary, its libraries and the libc
 * arenas come to about 10 MiB besides the planned buffers; thread stacks
 * touch little.  The parsed metadata and the tokenizer's tables grow with
 * the vocabulary, roughly three times the GGUF header's bytes. */
uint64_t mem_runtime_overhead(int threads, uint64_t metadata_bytes)
{
    return (16ull << 20) + (uint64_t)(threads > 0 ? threads : 1) * (1ull << 20) + 3 * metadata_bytes;
}

/* Rounded up, so "raise --mem to at least X" is always enough; below 1 MiB
 * in KiB, or a budget of 1K would read as "0.1 MiB". */
static const char *mib(uint64_t b, char *buf)
{
    if (b < 1 << 20) snprintf(buf, 32, "%.1f KiB", (double)((b * 10 + (1 << 10) - 1) >> 10) / 10);
    else snprintf(buf, 32, "%.1f MiB", (double)((b * 10 + (1 << 20) - 1) >> 20) / 10);
    return buf;
}

int mem_plan_make(mem_plan *p, const mem_plan_in *in, sl_err *err)
{
    char a[32], b[32], c[32], d[32];
    *p = (mem_plan){.total = in->total, .spine = in->spine, .kv = in->kv, .state = in->state, .scratch = in->scratch,
                    .runtime = mem_runtime_overhead(in->threads, in->metadata), .slot_bytes = in->slot_bytes,
                    .experts = in->experts};
    p->meta = (uint64_t)in->experts * 24 + in->log; /* cache key record + heat count + used flag */
    uint64_t fixed = p->spine + p->kv + p->state + p->scratch + p->runtime + p->meta;
    if (fixed > p->total) {
        char e[32];
        return sl_errf(err, "--mem %s is too small: the spine (%s), KV cache and recurrent state (%s) and "
                            "scratch/runtime (%s) alone need %s",
                       mib(p->total, a), mib(p->spine, b), mib(p->kv + p->state, c),
                       mib(p->scratch + p->runtime + p->meta, d), mib(fixed, e));
    }
    uint64_t left = p->total - fixed;
    int64_t slots = in->slot_bytes ? (int64_t)(left / in->slot_bytes) : 0;
    if (slots > in->experts) slots = in->experts;
    if (slots < in->min_slots)
        return sl_errf(err, "--mem %s leaves %s for the expert cache, less than the %d experts (%s each) one token needs; raise --mem to at least %s",
                       mib(p->total, a), mib(left, b), in->min_slots, mib(in->slot_bytes, c),
                       mib(fixed + (uint64_t)in->min_slots * in->slot_bytes, d));
    p->slots = slots;
    p->cache = (uint64_t)slots * in->slot_bytes;
    p->unused = left - p->cache;
    if (in->pin > p->cache)
        return sl_errf(err, "--pin %s is larger than the expert cache (%s) the budget leaves", mib(in->pin, a),
                       mib(p->cache, b));
    p->pin = in->pin;
    return 0;
}
