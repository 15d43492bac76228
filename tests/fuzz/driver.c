/* Replays inputs through a harness without libFuzzer: every file named on
 * the command line, or inside a directory named there.  `make test` runs
 * each harness over its committed regression inputs and seeds, so a bug a
 * fuzzer found stays fixed (and the test-asan build checks it under ASan). */
#include <dirent.h>
#include <sys/stat.h>

#include "fuzz.h"

__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    return 0;
}

static long run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t cap = 1 << 16, n = 0;
    uint8_t *b = malloc(cap);
    size_t k;
    while (b && (k = fread(b + n, 1, cap - n, f)) > 0)
        if ((n += k) == cap) b = realloc(b, cap *= 2);
    fclose(f);
    if (!b) return 0;
    LLVMFuzzerTestOneInput(b, n);
    free(b);
    return 1;
}

static long run_path(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0) return 0;
    if (!S_ISDIR(st.st_mode)) return run_file(path);
    DIR *d = opendir(path);
    long n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", path, e->d_name);
        n += run_path(p);
    }
    if (d) closedir(d);
    return n;
}

int main(int argc, char **argv)
{
    LLVMFuzzerInitialize(&argc, &argv);
    long n = 0;
    for (int i = 1; i < argc; i++) n += run_path(argv[i]);
    printf("%ld inputs\n", n);
    return 0;
}
