/* sluice side of tok_vs_llama (kept apart: llama.h and sluice's GGUF header
 * both define the ggml type enum). */
#include <stdio.h>

#include "gguf/gguf.h"
#include "tok/tokenizer.h"

void *sl_side_open(const char *path, char *msg, size_t cap)
{
    gguf_file *g;
    sl_vocab *v;
    sl_err e;
    if (gguf_open(&g, path, &e)) {
        snprintf(msg, cap, "%s", e.msg);
        return NULL;
    }
    int rc = vocab_load(&v, g, &e);
    gguf_close(g);
    if (rc) snprintf(msg, cap, "%s", e.msg);
    return rc ? NULL : v;
}
