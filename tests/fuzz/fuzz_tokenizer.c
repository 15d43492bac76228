/* Tokenizer on arbitrary bytes, for each vocabulary kind: byte 0 picks the
 * vocabulary, byte 1 the flags (add_special, parse_special), the rest is
 * the text.  Every id produced must be a token of the vocabulary, and the
 * ids must detokenize. */
#include "vocabs.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    load_vocabs();
    if (!n_vocabs) fprintf(stderr, "fuzz_tokenizer: no vocabulary found\n");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2 || !n_vocabs) return 0;
    const sl_vocab *v = vocabs[data[0] % n_vocabs];
    bool add = data[1] & 1, parse = data[1] & 2;
    int32_t *ids = NULL;
    size_t n = 0;
    sl_err err;
    if (vocab_tokenize(v, (const char *)data + 2, size - 2, add, parse, &ids, &n, &err) == 0) {
        for (size_t i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= vocab_n_tokens(v)) abort(); /* an id outside the vocabulary */
        char *text = NULL;
        size_t len;
        if (vocab_detokenize(v, ids, n, false, parse, &text, &len, &err) == 0) free(text);
    }
    free(ids);
    return 0;
}
