/* The vocabularies the tokenizer harnesses run on: every vocab GGUF under
 * ../shared/vocab (BPE with several pre-tokenizers, SentencePiece) when it
 * is there, else the repository's models and lean fixtures. */
#ifndef SLUICE_FUZZ_VOCABS_H
#define SLUICE_FUZZ_VOCABS_H

#include <glob.h>

#include "fuzz.h"
#include "gguf/gguf.h"
#include "tok/tokenizer.h"

enum { MAX_VOCABS = 32 };
static sl_vocab *vocabs[MAX_VOCABS];
static int n_vocabs;

static void load_glob(const char *pattern)
{
    glob_t gl;
    if (glob(pattern, 0, NULL, &gl) != 0) return;
    for (size_t i = 0; i < gl.gl_pathc && n_vocabs < MAX_VOCABS; i++) {
        gguf_file *g;
        sl_err err;
        if (gguf_open(&g, gl.gl_pathv[i], &err)) continue;
        if (vocab_load(&vocabs[n_vocabs], g, &err) == 0) n_vocabs++;
        gguf_close(g); /* the vocabulary keeps its own copy */
    }
    globfree(&gl);
}

static void load_vocabs(void)
{
    char p[512];
    const char *shared = getenv("SLUICE_SHARED");
    snprintf(p, sizeof p, "%s/%s/vocab/*.gguf", fz_root(), shared ? shared : "../shared");
    if (shared && shared[0] == '/') snprintf(p, sizeof p, "%s/vocab/*.gguf", shared);
    load_glob(p);
    if (n_vocabs) return;
    snprintf(p, sizeof p, "%s/models/*.gguf", fz_root());
    load_glob(p);
    snprintf(p, sizeof p, "%s/tests/fixtures/lean/models/*.gguf", fz_root());
    load_glob(p);
}

#endif
