/* Pack manifests (header, drives, layers and their parts, records with
 * their copies): every count, offset and size must be checked before use. */
#include "experts/pack.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fz_file("m.pack", data, size);
    pack_manifest m;
    sl_err err;
    if (pack_manifest_read(&m, path, &err) == 0) {
        for (uint32_t i = 0; i < m.n_records; i++) /* the index the reader built must agree */
            if (m.rec_of[(uint64_t)m.rec[i].layer * m.n_expert + m.rec[i].expert] != (int32_t)i) abort();
        for (uint32_t l = 0; l < m.n_layers; l++) pack_read_bytes(&m, (int)l);
        pack_manifest_free(&m);
    }
    return 0;
}
