#include <ctype.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

int cli_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("sluice: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

static bool readable(const char *p) { return access(p, R_OK) == 0; }

/* Where the bundled models live relative to the binary's directory: the
 * checkout (build/sluice, models/) and an installed tree (PREFIX/bin/sluice,
 * PREFIX/share/sluice/models/, written by `make install`). */
static const char *const MODEL_DIRS[] = {"../models", "../share/sluice/models"};

int cli_model_dirs(char dirs[][PATH_MAX + 32], int cap)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return 0;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash) return 0;
    *slash = 0; /* .../build or PREFIX/bin */
    int k = 0;
    for (size_t i = 0; i < sizeof MODEL_DIRS / sizeof *MODEL_DIRS && k < cap; i++)
        if (snprintf(dirs[k], PATH_MAX + 32, "%s/%s", exe, MODEL_DIRS[i]) < PATH_MAX + 32) k++;
    return k;
}

const char *cli_default_model(void)
{
    static char path[PATH_MAX + 64];
    const char *env = getenv("SLUICE_MODEL");
    if (env && *env) return env;
    char dirs[2][PATH_MAX + 32];
    int nd = cli_model_dirs(dirs, 2);
    for (int i = 0; i < nd; i++) {
        if (snprintf(path, sizeof path, "%s/tinymoe-q8_0.gguf", dirs[i]) >= (int)sizeof path) continue;
        if (readable(path)) return path;
    }
    snprintf(path, sizeof path, "models/tinymoe-q8_0.gguf");
    return readable(path) ? path : NULL;
}

int64_t cli_parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || v < 0) return -1;
    while (isspace((unsigned char)*end)) end++;
    double mul = 1;
    switch (toupper((unsigned char)*end)) {
    case 'K': mul = 1024.0; end++; break;
    case 'M': mul = 1024.0 * 1024; end++; break;
    case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
    case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
    case 0: break;
    default: return -1;
    }
    if (*end == 'i' || *end == 'I') end++;
    if (*end == 'B' || *end == 'b') end++;
    if (*end) return -1;
    double bytes = v * mul;
    if (bytes > (double)INT64_MAX) return -1;
    return (int64_t)bytes;
}

const char *cli_fmt_bytes(uint64_t bytes, char *buf, int cap)
{
    const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024 && u < 4) v /= 1024, u++;
    if (u == 0) snprintf(buf, (size_t)cap, "%llu B", (unsigned long long)bytes);
    else snprintf(buf, (size_t)cap, "%.2f %s", v, unit[u]);
    return buf;
}
