/* Shared by the libFuzzer harnesses in tests/fuzz (one per input surface).
 * Each harness defines LLVMFuzzerTestOneInput; `make fuzz` links it with
 * libFuzzer (clang, ASan + UBSan), `make test` with driver.c, which replays
 * the committed regression inputs (tests/fuzz/regress/NAME) and seeds.
 *
 * Readers that take a path get the input as a file in a private directory
 * under /dev/shm (memory-backed, so an execution costs no disk I/O). */
#ifndef SLUICE_FUZZ_H
#define SLUICE_FUZZ_H

#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* The harness's scratch directory (created on first use, removed at exit). */
static char fz_dir_path[64];

__attribute__((unused)) static void fz_cleanup(void)
{
    char cmd[96];
    snprintf(cmd, sizeof cmd, "rm -rf %s", fz_dir_path);
    if (fz_dir_path[0] && system(cmd)) {}
}

__attribute__((unused)) static const char *fz_dir(void)
{
    if (!fz_dir_path[0]) {
        snprintf(fz_dir_path, sizeof fz_dir_path, "%s/sluice-fuzz-XXXXXX",
                 access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
        if (!mkdtemp(fz_dir_path)) abort();
        atexit(fz_cleanup);
    }
    return fz_dir_path;
}

/* Writes N bytes to NAME in the scratch directory; returns its path. */
__attribute__((unused)) static const char *fz_file(const char *name, const uint8_t *d, size_t n)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", fz_dir(), name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) abort();
    for (size_t done = 0; done < n;) {
        ssize_t k = write(fd, d + done, n - done);
        if (k <= 0) abort();
        done += (size_t)k;
    }
    close(fd);
    return path;
}

/* Where the repository's fixtures and ../shared are (runs start in the
 * repository root; SLUICE_ROOT overrides). */
__attribute__((unused)) static const char *fz_root(void)
{
    const char *r = getenv("SLUICE_ROOT");
    return r ? r : ".";
}

#endif
