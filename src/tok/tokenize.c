/* Text -> ids (llama_vocab::impl::tokenize): special tokens are split out
 * first, then every raw fragment is tokenized on its own.  SentencePiece
 * fragments get a leading space when they follow a special token or start
 * the text (add_space_prefix) and spaces become U+2581. */
#include <stdlib.h>
#include <string.h>

#include "tok/tok_internal.h"

static int push_special(id_vec *out, int32_t id, const char *what, sl_err *err)
{
    if (id < 0) return sl_errf(err, "the vocabulary asks for a %s token but has none", what);
    return id_push(out, id) ? sl_errf(err, "out of memory") : 0;
}

static int spm_fragment(const sl_vocab *v, word_cache *cache, const char *text, size_t len, bool space_prefix,
                        id_vec *out, sl_err *err)
{
    size_t spaces = space_prefix;
    for (size_t i = 0; i < len; i++) spaces += text[i] == ' ';
    char *buf = malloc(len + 2 * spaces + 4);
    if (!buf) return sl_errf(err, "out of memory");
    size_t n = 0;
    if (space_prefix) n += (size_t)(stpcpy(buf, "\xe2\x96\x81") - buf);
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') n += (size_t)(stpcpy(buf + n, "\xe2\x96\x81") - (buf + n));
        else buf[n++] = text[i];
    }
    int rc = spm_tokenize(v, cache, buf, n, out, err);
    free(buf);
    return rc;
}

static int tokenize_fragments(const sl_vocab *v, const char *text, const fragment *f, size_t nf, id_vec *out,
                              sl_err *err)
{
    word_cache *cache = word_cache_new();
    if (!cache) return sl_errf(err, "out of memory");
    bool prev_special = true;
    int rc = 0;
    for (size_t i = 0; i < nf && !rc; i++) {
        if (f[i].token >= 0) {
            rc = id_push(out, f[i].token) ? sl_errf(err, "out of memory") : 0;
            prev_special = true;
        } else if (v->type == VOCAB_SPM) {
            rc = spm_fragment(v, cache, text + f[i].off, f[i].len, v->add_space_prefix && prev_special, out, err);
            prev_special = false;
        } else {
            rc = bpe_tokenize(v, cache, text + f[i].off, f[i].len, out, err);
        }
    }
    word_cache_free(cache);
    return rc;
}

int vocab_tokenize(const sl_vocab *v, const char *text, size_t len, bool add_special, bool parse_special,
                   int32_t **ids, size_t *n, sl_err *err)
{
    *ids = NULL;
    *n = 0;
    id_vec out = {0};
    fragment *f = NULL;
    size_t nf = 0;
    int rc = special_partition(v, text, len, parse_special, &f, &nf, err);
    if (!rc && add_special && v->add_bos) rc = push_special(&out, v->bos, "BOS", err);
    if (!rc) rc = tokenize_fragments(v, text, f, nf, &out, err);
    if (!rc && add_special && v->add_eos) rc = push_special(&out, v->eos, "EOS", err);
    free(f);
    if (rc) {
        free(out.v);
        return -1;
    }
    *ids = out.v ? out.v : malloc(sizeof(int32_t));
    *n = out.n;
    return *ids ? 0 : sl_errf(err, "out of memory");
}
