/* sluice command-line entry: dispatches to one subcommand per file. */
#include <stdio.h>
#include <string.h>

#include "cli/build_info.h"
#include "cli/cli.h"
#include "sluice.h"

typedef struct {
    const char *name;
    cli_cmd_fn fn;
    const char *help;
} command;

static const command COMMANDS[] = {
    {"inspect", cmd_inspect, "show a GGUF model's metadata, tensors and spine/expert split"},
    {"replay", cmd_replay, "replay an expert-routing trace through the cache policies"},
    {"heat", cmd_heat, "show, draw, import or reset a model's persisted expert heat"},
    {"tokenize", cmd_tokenize, "print the token ids of a text (as llama-tokenize)"},
    {"detokenize", cmd_detokenize, "print the text of token ids"},
    {"check", cmd_check, "read every tensor once and check it decodes (and a pack's checksums)"},
    {"pack", cmd_pack, "copy a model's routed experts into a multi-drive pack"},
    {"run", cmd_run, "generate text from a prompt"},
    {"chat", cmd_chat, "chat interactively, keeping the KV cache between turns"},
    {"serve", cmd_serve, "serve the model over HTTP (OpenAI and Anthropic APIs, web chat)"},
    {"bench", cmd_bench, "measure prompt and generation speed (like llama-bench)"},
    {"synth", cmd_synth, "write a synthetic MoE model of a real architecture's shape (for benchmarks)"},
};

static void usage(FILE *f)
{
    fprintf(f, "sluice %s: run Mixture-of-Experts models larger than RAM, exactly\n\n", SLUICE_VERSION);
    fprintf(f, "usage: sluice COMMAND [options]   (sluice COMMAND --help for details)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        fprintf(f, "  %-12s %s\n", COMMANDS[i].name, COMMANDS[i].help);
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("sluice %s (commit %s)\n", SLUICE_VERSION, cli_build_commit());
        return 0;
    }
    /* `sluice help CMD` is `sluice CMD --help` */
    char *help_argv[] = {argv[0], argc > 2 ? argv[2] : NULL, (char *)"--help", NULL};
    if (!strcmp(argv[1], "help")) {
        if (argc < 3) return usage(stdout), 0;
        argc = 3, argv = help_argv;
    }
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++) {
        if (strcmp(argv[1], COMMANDS[i].name)) continue;
        int rc = cli_llama_args(argc - 1, argv + 1);
        return rc ? rc : COMMANDS[i].fn(argc - 1, argv + 1);
    }
    fprintf(stderr, "sluice: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
