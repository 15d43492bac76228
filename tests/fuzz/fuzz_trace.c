/* Routing traces (--trace-out files): a trace that loads is replayed
 * through the cache policies, which index by its layer and expert ids. */
#include "experts/trace.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fz_file("t.json", data, size);
    route_trace t;
    sl_err err;
    if (trace_load(&t, path, &err) == 0) {
        cache_counters c;
        trace_replay(&t, 4, CACHE_LRU, 16, 0, &c, &err);
        trace_free(&t);
    }
    return 0;
}
