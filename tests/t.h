/* A small test harness.  Each test binary runs named cases; every case prints
 * one line, "ok NAME", "not ok NAME: first failure" or "skip NAME: reason",
 * which tests/run.sh counts.  Shared references live in ../shared (or
 * $SLUICE_SHARED); cases that need them skip when it is absent, so a fresh
 * clone still passes on the fixtures under tests/fixtures. */
#ifndef SLUICE_TEST_T_H
#define SLUICE_TEST_T_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    const char *name;
    int failed;
    char first[512];
} t_case_state;

static t_case_state t_cur;
static int t_npass, t_nfail, t_nskip;

static void t_begin(const char *name)
{
    t_cur.name = name;
    t_cur.failed = 0;
    t_cur.first[0] = 0;
}

static void t_failf(const char *file, int line, const char *fmt, ...)
{
    if (t_cur.failed++ == 0) {
        int n = snprintf(t_cur.first, sizeof t_cur.first, "%s:%d: ", file, line);
        va_list ap;
        va_start(ap, fmt);
        if (n > 0 && (size_t)n < sizeof t_cur.first)
            vsnprintf(t_cur.first + n, sizeof t_cur.first - (size_t)n, fmt, ap);
        va_end(ap);
    }
}

static int t_end(void)
{
    if (t_cur.failed) {
        printf("not ok %s: %s", t_cur.name, t_cur.first);
        if (t_cur.failed > 1) printf(" (+%d more)", t_cur.failed - 1);
        printf("\n");
        t_nfail++;
    } else {
        printf("ok %s\n", t_cur.name);
        t_npass++;
    }
    fflush(stdout);
    return !t_cur.failed;
}

__attribute__((unused)) static void t_skip(const char *name, const char *why)
{
    printf("skip %s: %s\n", name, why);
    t_nskip++;
    fflush(stdout);
}

#define T_CHECK(cond, ...) \
    do { if (!(cond)) t_failf(__FILE__, __LINE__, __VA_ARGS__); } while (0)

/* Path under the shared reference folder, or NULL when it is not present. */
__attribute__((unused)) static const char *t_shared(const char *rel)
{
    static char buf[4][1024];
    static int slot;
    const char *root = getenv("SLUICE_SHARED");
    if (!root || !*root) root = "../shared";
    char *p = buf[slot++ & 3];
    snprintf(p, sizeof buf[0], "%s/%s", root, rel);
    struct stat st;
    return stat(p, &st) == 0 ? p : NULL;
}

static int t_done(void)
{
    return t_nfail ? 1 : 0;
}

#endif
