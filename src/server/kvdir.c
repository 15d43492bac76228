/* --kv-dir (kvdir.h).  The index lives in memory: each file's tokens (4
 * bytes a token, read from its header at start), so a prompt finds the
 * saved context it shares the longest prefix with: a chat's next turn
 * shares the conversation so far, up to where the re-rendered reply
 * differs from the generated one. */
#define XXH_INLINE_ALL
#include "server/kvdir.h"

#include <dirent.h>
#include <stdbool.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

enum { ERR_CAP = 1024 };

typedef struct {
    char name[40];
    size_t n;
    int32_t *ids;
    uint64_t bytes;
    double used; /* last use (mtime), for LRU */
} kv_entry;

struct kvdir {
    char *dir;
    uint64_t max_bytes;
    kv_entry *e;
    size_t n, cap;
};

static uint64_t hash_ids(const int32_t *ids, size_t n) { return XXH3_64bits(ids, n * sizeof *ids); }

static int path_of(const kvdir *k, const char *name, char *buf, size_t cap)
{
    return snprintf(buf, cap, "%s/%s", k->dir, name) < (int)cap ? 0 : -1;
}

static int add_entry(kvdir *k, const kv_entry *e)
{
    if (k->n == k->cap) {
        size_t cap = k->cap ? k->cap * 2 : 16;
        kv_entry *p = realloc(k->e, cap * sizeof *p);
        if (!p) return -1;
        k->e = p, k->cap = cap;
    }
    k->e[k->n++] = *e;
    return 0;
}

static void drop(kvdir *k, size_t i, bool unlink_file)
{
    char p[4096];
    if (unlink_file && path_of(k, k->e[i].name, p, sizeof p) == 0) unlink(p);
    free(k->e[i].ids);
    k->e[i] = k->e[--k->n];
}

static size_t common(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
    size_t i = 0;
    while (i < na && i < nb && a[i] == b[i]) i++;
    return i;
}

static double mtime_of(const struct stat *st) { return (double)st->st_mtim.tv_sec + st->st_mtim.tv_nsec * 1e-9; }

int kvdir_open(kvdir **out, sluice *sl, const char *dir, uint64_t max_bytes, sl_err *err)
{
    *out = NULL;
    if (mkdir(dir, 0755) && errno != EEXIST) return sl_errf(err, "%s: %s", dir, strerror(errno));
    DIR *d = opendir(dir);
    if (!d) return sl_errf(err, "%s: %s", dir, strerror(errno));
    kvdir *k = calloc(1, sizeof *k);
    if (!k || !(k->dir = strdup(dir))) return closedir(d), free(k), sl_errf(err, "out of memory");
    k->max_bytes = max_bytes;
    for (struct dirent *de; (de = readdir(d));) {
        size_t nl = strlen(de->d_name);
        if (nl < 6 || nl >= sizeof k->e[0].name || strcmp(de->d_name + nl - 5, ".slkv")) continue;
        char p[4096], msg[ERR_CAP];
        struct stat st;
        int32_t *ids = NULL;
        size_t n = 0;
        if (path_of(k, de->d_name, p, sizeof p) || stat(p, &st)) continue;
        if (sluice_state_peek(sl, p, &ids, &n, msg, sizeof msg)) {
            fprintf(stderr, "sluice serve: warning: --kv-dir: ignoring %s\n", msg);
            continue;
        }
        kv_entry e = {.n = n, .ids = malloc((n ? n : 1) * sizeof *ids),
                      .bytes = (uint64_t)st.st_size, .used = mtime_of(&st)};
        memcpy(e.name, de->d_name, nl + 1); /* nl < sizeof e.name, checked above */
        if (e.ids) memcpy(e.ids, ids, n * sizeof *ids);
        sluice_free(ids);
        if (!e.ids || add_entry(k, &e)) {
            free(e.ids);
            break;
        }
    }
    closedir(d);
    *out = k;
    return 0;
}

void kvdir_close(kvdir *k)
{
    if (!k) return;
    for (size_t i = 0; i < k->n; i++) free(k->e[i].ids);
    free(k->dir);
    free(k->e);
    free(k);
}

size_t kvdir_restore(kvdir *k, sluice *sl, const int32_t *ids, size_t n, size_t have)
{
    for (;;) {
        size_t best = (size_t)-1, best_n = have;
        for (size_t i = 0; i < k->n; i++) {
            size_t c = common(k->e[i].ids, k->e[i].n, ids, n);
            if (c > best_n) best = i, best_n = c;
        }
        if (best == (size_t)-1) return have;
        char p[4096], msg[ERR_CAP];
        if (path_of(k, k->e[best].name, p, sizeof p) == 0 && sluice_state_load(sl, p, msg, sizeof msg) == 0) {
            size_t got = 0;
            const int32_t *t = sluice_tokens(sl, &got);
            if (got == k->e[best].n && !memcmp(t, k->e[best].ids, got * sizeof *ids)) {
                utimensat(AT_FDCWD, p, NULL, 0); /* used now: last in line for eviction */
                k->e[best].used = (double)time(NULL);
                return best_n; /* generation keeps this much and rewinds the rest */
            }
            snprintf(msg, sizeof msg, "%.900s: its tokens are not the ones its header listed", p);
            sluice_reset(sl);
        }
        fprintf(stderr, "sluice serve: warning: --kv-dir: not restoring %s\n", msg);
        drop(k, best, false);
    }
}

static void evict(kvdir *k)
{
    uint64_t total = 0;
    for (size_t i = 0; i < k->n; i++) total += k->e[i].bytes;
    while (total > k->max_bytes && k->n) {
        size_t old = 0;
        for (size_t i = 1; i < k->n; i++)
            if (k->e[i].used < k->e[old].used) old = i;
        total -= k->e[old].bytes;
        drop(k, old, true);
    }
}

void kvdir_save(kvdir *k, sluice *sl)
{
    size_t n = 0;
    const int32_t *ids = sluice_tokens(sl, &n);
    if (!n) return;
    uint64_t h = hash_ids(ids, n);
    kv_entry e = {.n = n, .ids = malloc(n * sizeof *ids), .used = (double)time(NULL)};
    if (!e.ids) return;
    memcpy(e.ids, ids, n * sizeof *ids);
    snprintf(e.name, sizeof e.name, "%016llx-%zu.slkv", (unsigned long long)h, n);
    char p[4096], msg[ERR_CAP];
    struct stat st;
    if (path_of(k, e.name, p, sizeof p)) return free(e.ids);
    for (size_t i = 0; i < k->n; i++)
        if (!strcmp(k->e[i].name, e.name)) drop(k, i, false);
    if (sluice_state_save(sl, p, msg, sizeof msg) || stat(p, &st)) {
        fprintf(stderr, "sluice serve: warning: --kv-dir: %s\n", msg);
        return free(e.ids);
    }
    e.bytes = (uint64_t)st.st_size;
    /* a saved context this one extends is no longer needed */
    for (size_t i = k->n; i-- > 0;)
        if (k->e[i].n < n && common(k->e[i].ids, k->e[i].n, ids, n) == k->e[i].n) drop(k, i, true);
    if (add_entry(k, &e)) return free(e.ids);
    evict(k);
}
