/* GGUF reader: header, metadata of every type, tensor infos, alignment, and
 * split sets.  The input is one file, or several parts separated by the
 * dictionary word SLUICEPART, written as NAME-0000k-of-0000n.gguf so the
 * reader finds them as a split model.  A file that opens has every tensor
 * read (the small ones whole, the others their first and last bytes), so
 * the offsets it accepted are checked against the parts' sizes. */
#include "fuzz.h"
#include "gguf/gguf.h"

static const char SEP[] = "SLUICEPART";
enum { MAX_PARTS = 4 };

static void read_tensors(const gguf_file *g)
{
    uint8_t buf[256];
    sl_err err;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        uint64_t n = t->nbytes < sizeof buf ? t->nbytes : sizeof buf;
        if (gguf_read_tensor(g, t, 0, buf, n, &err) == 0 && t->nbytes > n)
            gguf_read_tensor(g, t, t->nbytes - n, buf, n, &err);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *at[MAX_PARTS + 1];
    size_t len[MAX_PARTS];
    int parts = 0;
    at[0] = data;
    for (const uint8_t *p = data, *end = data + size; parts < MAX_PARTS;) {
        const uint8_t *s = parts + 1 < MAX_PARTS ? memmem(p, (size_t)(end - p), SEP, sizeof SEP - 1) : NULL;
        len[parts] = (size_t)((s ? s : end) - p);
        at[parts++] = p;
        if (!s) break;
        p = s + sizeof SEP - 1;
    }
    char name[128], first[256] = "";
    for (int i = 0; i < MAX_PARTS; i++) /* no part of an earlier input may linger */
        for (int n = 1; n <= MAX_PARTS; n++) {
            snprintf(name, sizeof name, "%s/fz-%05d-of-%05d.gguf", fz_dir(), i + 1, n);
            unlink(name);
        }
    for (int i = 0; i < parts; i++) {
        if (parts > 1) snprintf(name, sizeof name, "fz-%05d-of-%05d.gguf", i + 1, parts);
        else snprintf(name, sizeof name, "one.gguf");
        const char *path = fz_file(name, at[i], len[i]);
        if (i == 0) snprintf(first, sizeof first, "%s", path);
    }
    gguf_file *g;
    sl_err err;
    if (gguf_open(&g, first, &err) == 0) {
        read_tensors(g);
        gguf_close(g);
    }
    return 0;
}
