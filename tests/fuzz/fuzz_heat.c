/* Heat files: frame, checksum, header, counts.  A file that loads must
 * hold finite, non-negative counts of the geometry it declares. */
#include <math.h>

#include "experts/heat.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fz_file("m.heat", data, size);
    heat_table h;
    sl_err warn;
    if (heat_load(&h, path, NULL, 0, 0, &warn) == HEAT_LOADED) {
        size_t n = (size_t)h.n_layers * (size_t)h.n_expert;
        for (size_t i = 0; i < n; i++)
            if (!isfinite(h.count[i]) || h.count[i] < 0) abort();
        int32_t keys[16];
        heat_pin_opts o = heat_pin_defaults();
        char note[256];
        heat_pick_pins(&h, 16, &o, keys, note, sizeof note);
        heat_table_free(&h);
    }
    return 0;
}
