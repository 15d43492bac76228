/* Tokenizer throughput: loads a vocabulary, tokenizes a text file REPS
 * times and prints the median (plus detokenization of the result).
 * Built and run by bench/tokenize.sh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gguf/gguf.h"
#include "tok/tokenizer.h"
#include "util/clock.h"

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: tok_bench MODEL.gguf TEXT_FILE [REPS]\n");
        return 2;
    }
    int reps = argc > 3 ? atoi(argv[3]) : 5;
    if (reps < 1 || reps > 100) reps = 5;
    FILE *f = fopen(argv[2], "rb");
    if (!f) {
        perror(argv[2]);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)len + 1);
    if (!text || fread(text, 1, (size_t)len, f) != (size_t)len) return 1;
    fclose(f);
    sl_err err;
    gguf_file *g;
    sl_vocab *v;
    double t0 = sl_now();
    if (gguf_open(&g, argv[1], &err) || vocab_load(&v, g, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    double t_load = sl_now() - t0;
    double tt[100], td[100];
    size_t n = 0;
    for (int r = 0; r < reps; r++) {
        int32_t *ids;
        char *out;
        size_t olen;
        t0 = sl_now();
        if (vocab_tokenize(v, text, (size_t)len, false, false, &ids, &n, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        tt[r] = sl_now() - t0;
        t0 = sl_now();
        if (vocab_detokenize(v, ids, n, false, false, &out, &olen, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        td[r] = sl_now() - t0;
        free(ids);
        free(out);
    }
    qsort(tt, (size_t)reps, sizeof tt[0], cmp_d);
    qsort(td, (size_t)reps, sizeof td[0], cmp_d);
    double mb = (double)len / 1e6;
    printf("%-28s %-12s load %6.0f ms  tokenize %7.1f ms (%6.2f MB/s, %zu tokens)  detokenize %6.1f ms\n",
           strrchr(argv[1], '/') ? strrchr(argv[1], '/') + 1 : argv[1], vocab_pre(v) ? vocab_pre(v) : "spm",
           1e3 * t_load, 1e3 * tt[reps / 2], mb / tt[reps / 2], n, 1e3 * td[reps / 2]);
    vocab_free(v);
    gguf_close(g);
    free(text);
    return 0;
}
