/* Detokenization of arbitrary id sequences (ids out of range included),
 * whole and streamed: byte 0 picks the vocabulary, byte 1 the flags, the
 * rest are little-endian int32 ids. */
#include "vocabs.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    load_vocabs();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2 || !n_vocabs) return 0;
    const sl_vocab *v = vocabs[data[0] % n_vocabs];
    bool remove = data[1] & 1, unparse = data[1] & 2;
    size_t n = (size - 2) / 4;
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) return 0;
    memcpy(ids, data + 2, n * 4); /* n whole ids; the tail bytes are ignored */
    char *text = NULL;
    size_t len;
    sl_err err;
    if (vocab_detokenize(v, ids, n, remove, unparse, &text, &len, &err) == 0) {
        if (strlen(text) > len) abort(); /* the length must cover the text */
        free(text);
    }
    sl_detok d = {0};
    char out[1024];
    for (size_t i = 0; i < n; i++) {
        size_t k = detok_push_special(&d, v, ids[i], unparse, out, sizeof out);
        if (k > sizeof out) abort();
        char piece[64];
        vocab_token_to_piece(v, ids[i], unparse, piece, sizeof piece);
    }
    if (detok_flush(&d, out, sizeof out) > sizeof out) abort();
    free(ids);
    return 0;
}
