#include "cli/throttle.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

static const char BLKIO[] = "/sys/fs/cgroup/blkio";

static int write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    int rc = fputs(text, f) < 0;
    if (fclose(f)) rc = 1;
    return rc ? -1 : 0;
}

/* The whole disk of a partition: blk-throttle works on a disk's queue. */
static void whole_disk(unsigned *maj, unsigned *min)
{
    char path[96], buf[32];
    snprintf(path, sizeof path, "/sys/dev/block/%u:%u/partition", *maj, *min);
    if (access(path, F_OK)) return;
    snprintf(path, sizeof path, "/sys/dev/block/%u:%u/../dev", *maj, *min);
    FILE *f = fopen(path, "r");
    if (!f) return;
    unsigned a, b;
    if (fgets(buf, sizeof buf, f) && sscanf(buf, "%u:%u", &a, &b) == 2) *maj = a, *min = b;
    fclose(f);
}

int blkio_throttle_start(blkio_throttle *t, const char *const *paths, int n, uint64_t bps, char *why, size_t cap)
{
    memset(t, 0, sizeof *t);
    if (geteuid() != 0 || access(BLKIO, W_OK))
        return snprintf(why, cap, "no blkio cgroup here (needs root and a writable %s)", BLKIO), 0;
    snprintf(t->dir, sizeof t->dir, "%s/sluice-bench-%d", BLKIO, (int)getpid());
    if (mkdir(t->dir, 0755) && errno != EEXIST)
        return snprintf(why, cap, "cannot create %s: %s", t->dir, strerror(errno)), 0;
    char path[300], line[64];
    snprintf(path, sizeof path, "%s/blkio.throttle.read_bps_device", t->dir);
    for (int i = 0; i < n; i++) {
        struct stat st;
        if (stat(paths[i], &st)) {
            snprintf(why, cap, "%s: %s", paths[i], strerror(errno));
            blkio_throttle_stop(t);
            return -1;
        }
        unsigned maj = major(st.st_dev), min = minor(st.st_dev);
        whole_disk(&maj, &min);
        snprintf(line, sizeof line, "%u:%u", maj, min);
        if (strstr(t->devices, line)) continue;
        char rule[96];
        snprintf(rule, sizeof rule, "%s %llu", line, (unsigned long long)bps);
        if (write_file(path, rule)) {
            snprintf(why, cap, "cannot write '%s' to %s: %s", rule, path, strerror(errno));
            blkio_throttle_stop(t);
            return -1;
        }
        size_t len = strlen(t->devices);
        snprintf(t->devices + len, sizeof t->devices - len, "%s%s", len ? " " : "", line);
    }
    snprintf(path, sizeof path, "%s/cgroup.procs", t->dir);
    snprintf(line, sizeof line, "%d", (int)getpid());
    if (write_file(path, line)) {
        snprintf(why, cap, "cannot join %s: %s", t->dir, strerror(errno));
        blkio_throttle_stop(t);
        return -1;
    }
    t->active = true;
    return 0;
}

void blkio_throttle_stop(blkio_throttle *t)
{
    if (!t->dir[0]) return;
    char path[64], pid[32];
    snprintf(path, sizeof path, "%s/cgroup.procs", BLKIO);
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    if (t->active) write_file(path, pid);
    rmdir(t->dir);
    t->active = false;
    t->dir[0] = 0;
}
