/* llama.cpp's option spellings.  getopt reads "-ngl" as -n with the value
 * "gl", so the multi-letter short options llama.cpp users type are looked
 * at whole, before any command parses its arguments: the ones that mean
 * something here become their long form, the others are refused with the
 * reason, naming the option the user typed. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

typedef struct {
    const char *shrt, *lng; /* llama.cpp's short and long spelling (either may be NULL) */
    const char *to;         /* sluice's long option, or NULL: refused */
    const char *why;        /* why it is refused */
} llama_opt;

#define NO_GPU "sluice has no GPU offload: it runs on the CPU and streams routed experts from SSD under --mem"

static const llama_opt OPTS[] = {
    {"-fa", NULL, "--flash-attn", NULL},
    {"-ctk", NULL, "--cache-type-k", NULL},
    {"-ctv", NULL, "--cache-type-v", NULL},
    {"-ub", NULL, "--ubatch-size", NULL},
    {"-tb", NULL, "--threads-batch", NULL},
    {"-ngl", "--n-gpu-layers", NULL, NO_GPU},
    {NULL, "--gpu-layers", NULL, NO_GPU},
    {"-mg", "--main-gpu", NULL, NO_GPU},
    {"-sm", "--split-mode", NULL, NO_GPU},
    {"-ts", "--tensor-split", NULL, NO_GPU},
    {"-dev", "--device", NULL, NO_GPU},
    {"-nkvo", "--no-kv-offload", NULL, NO_GPU " (the KV cache is in RAM already)"},
    {"-cmoe", "--cpu-moe", NULL, "the experts stay on the CPU side already (in RAM, or streamed under --mem)"},
    {"-ncmoe", "--n-cpu-moe", NULL, "the experts stay on the CPU side already (in RAM, or streamed under --mem)"},
    {"-ot", "--override-tensor", NULL, "sluice places tensors itself: the spine in RAM, experts under --mem, the hottest "
                                       "pinned with --pin"},
    {"-cnv", "--conversation", NULL, "use `sluice chat` for a conversation"},
    {"-np", "--parallel", NULL, "one generation at a time (sluice serve queues requests)"},
};

/* Spellings one command takes: llama-bench's prompt + generation test.
 * Elsewhere getopt would read "-pg" as -p with the value "g". */
static const struct {
    const char *cmd, *shrt, *to;
} ONLY[] = {{"bench", "-pg", "--pg"}};

/* 1 if A is a one-command spelling (ARGV[I] rewritten, or refused: 2 in *RC). */
static bool only_opt(const char *cmd, char **argv, int i, int *rc)
{
    for (size_t k = 0; k < sizeof ONLY / sizeof ONLY[0]; k++) {
        if (strcmp(argv[i], ONLY[k].shrt)) continue;
        if (strcmp(cmd, ONLY[k].cmd)) {
            fprintf(stderr, "sluice: error: unknown option %s (sluice %s --help)\n", argv[i], cmd);
            *rc = 2;
        } else argv[i] = (char *)ONLY[k].to;
        return true;
    }
    return false;
}

/* The options commands that run a model take from the table. */
static bool runs_model(const char *cmd)
{
    return !strcmp(cmd, "run") || !strcmp(cmd, "chat") || !strcmp(cmd, "bench") || !strcmp(cmd, "serve");
}

int cli_llama_args(int argc, char **argv)
{
    bool model = runs_model(argv[0]);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--")) break;
        int rc = 0;
        if (only_opt(argv[0], argv, i, &rc)) {
            if (rc) return rc;
            continue;
        }
        for (size_t k = 0; k < sizeof OPTS / sizeof OPTS[0]; k++) {
            const llama_opt *o = &OPTS[k];
            bool s = o->shrt && !strcmp(a, o->shrt), l = o->lng && !strcmp(a, o->lng);
            if (!s && !l) continue;
            if (!o->to) {
                fprintf(stderr, "sluice: error: %s%s%s%s: %s\n", a, s && o->lng ? " (" : "", s && o->lng ? o->lng : "",
                        s && o->lng ? ")" : "", o->why);
                return 2;
            }
            if (!model) {
                fprintf(stderr, "sluice: error: unknown option %s (sluice %s --help)\n", a, argv[0]);
                return 2;
            }
            /* llama.cpp's -fa was a switch before it took on|off|auto */
            const char *next = i + 1 < argc ? argv[i + 1] : "";
            bool fa_switch = !strcmp(a, "-fa") && strcmp(next, "on") && strcmp(next, "off") && strcmp(next, "auto");
            argv[i] = (char *)(fa_switch ? "--flash-attn=on" : o->to);
            break;
        }
    }
    return 0;
}

const char *cli_bad_option(char **argv, char *buf, size_t cap)
{
    /* an unknown short option inside a cluster ("-xq") has not moved optind */
    if (optopt > 0 && optopt < 128) {
        snprintf(buf, cap, "-%c", optopt);
        return buf;
    }
    snprintf(buf, cap, "%s", argv[optind - 1]);
    return buf;
}

static int hex(int c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; }

char *cli_unescape(char *s)
{
    static const char FROM[] = "nrtabfv'\"\\?", TO[] = "\n\r\t\a\b\f\v'\"\\?";
    char *w = s;
    for (const char *r = s; *r;) {
        const char *k = r[0] == '\\' && r[1] ? strchr(FROM, r[1]) : NULL;
        if (k) {
            *w++ = TO[k - FROM], r += 2;
        } else if (r[0] == '\\' && r[1] == 'x' && hex(r[2]) >= 0) {
            int v = hex(r[2]);
            r += 3;
            if (hex(*r) >= 0) v = v * 16 + hex(*r++);
            *w++ = (char)v;
        } else {
            *w++ = *r++;
        }
    }
    *w = 0;
    return s;
}
