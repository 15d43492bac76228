/* The smallest program built on libsluice: open a GGUF model, stream a
 * greedy continuation of a prompt to stdout, then continue it once more in
 * a second call (the context carries over) and print the figures.
 *
 *   cc generate.c $(pkg-config --cflags --libs sluice) -o generate
 *   ./generate MODEL.gguf "Once upon a time" 32
 */
#include <stdio.h>
#include <stdlib.h>

#include <sluice.h>

static int print_text(void *user, const char *text, size_t len)
{
    (void)user;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return 0; /* nonzero would stop generation */
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL.gguf PROMPT [N_TOKENS]\n", argv[0]);
        return 2;
    }
    char err[1024];
    sluice_options o = sluice_options_default();
    o.model = argv[1];
    sluice *s;
    if (sluice_open(&s, &o, err, sizeof err)) {
        fprintf(stderr, "cannot open %s: %s\n", argv[1], err);
        return 1;
    }
    sluice_sampling sp = sluice_sampling_default();
    sp.temp = 0; /* greedy: the same text as llama.cpp's */
    sp.n_predict = argc > 3 ? atoi(argv[3]) : 32;
    int rc = sluice_generate(s, argv[2], &sp, print_text, NULL, NULL, err, sizeof err);
    if (!rc) {
        fputs("\n--- continued:\n", stdout);
        rc = sluice_generate(s, "", &sp, print_text, NULL, NULL, err, sizeof err);
    }
    if (rc) {
        fprintf(stderr, "generation failed: %s\n", err);
    } else {
        sluice_stats st;
        sluice_get_stats(s, &st);
        size_t n;
        sluice_tokens(s, &n);
        printf("\n--- %s (%s): %zu tokens in the context; load %.2f s, prompt %.1f tok/s, decode %.1f tok/s\n",
               sluice_model_name(s), sluice_model_arch(s), n, st.load_s, st.prompt_tps, st.decode_tps);
    }
    sluice_close(s);
    return rc ? 1 : 0;
}
