/* Shared pieces of the command-line front end. */
#ifndef SLUICE_CLI_H
#define SLUICE_CLI_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Each subcommand: argv[0] is the subcommand name; returns the exit code. */
typedef int (*cli_cmd_fn)(int argc, char **argv);

int cmd_inspect(int argc, char **argv);
int cmd_replay(int argc, char **argv);
int cmd_heat(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_pack(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_check(int argc, char **argv);

/* llama.cpp's multi-letter short options (-fa, -ctk, -ngl ...), looked at
 * whole before the command parses ARGV (ARGV[0] the command): those sluice
 * accepts become their long spelling, the others are refused with the
 * reason.  Returns 0, or 2 (usage error) after printing it. */
int cli_llama_args(int argc, char **argv);
/* The option getopt_long just refused ('?'), as the user typed it. */
const char *cli_bad_option(char **argv, char *buf, size_t cap);

/* llama.cpp's prompt escapes, in place: \n \r \t \a \b \f \v \' \" \\ \?
 * and \xHH; any other backslash stays as it is.  Returns S. */
char *cli_unescape(char *s);

/* Prints "sluice: error: MSG" to stderr and returns 1, for `return cli_fail(...)`. */
int cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Path of the bundled demo model ($SLUICE_MODEL, else tinymoe-q8_0.gguf in
 * the binary's checkout or installed tree, else ./models); NULL if none is found. */
const char *cli_default_model(void);
/* The directories the bundled models may be in, relative to the binary
 * (fills DIRS, returns how many). */
int cli_model_dirs(char dirs[][PATH_MAX + 32], int cap);

/* Parses sizes like 6G, 512M, 1.5GiB, 123456 into bytes; -1 on bad input. */
int64_t cli_parse_size(const char *s);

/* Formats bytes as a short human string ("1.25 GiB") into buf. */
const char *cli_fmt_bytes(uint64_t bytes, char *buf, int cap);

#endif
