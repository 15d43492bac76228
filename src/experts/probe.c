#include "experts/probe.h"
#include "util/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    struct io_uring ring;
    int fd;
    uint8_t *buf;
    uint32_t size;
    uint64_t span, rng;
} prober;

static void submit_one(prober *p, int slot)
{
    p->rng ^= p->rng << 13, p->rng ^= p->rng >> 7, p->rng ^= p->rng << 17;
    uint64_t off = (p->rng % p->span) & ~4095ull;
    struct io_uring_sqe *sqe = io_uring_get_sqe(&p->ring);
    io_uring_prep_read(sqe, p->fd, p->buf + (uint64_t)slot * p->size, p->size, off);
    io_uring_sqe_set_data64(sqe, (uint64_t)slot);
}

static int run(prober *p, int depth, double seconds, probe_result *out, sl_err *err)
{
    for (int i = 0; i < depth; i++) submit_one(p, i);
    io_uring_submit(&p->ring);
    double t0 = sl_now(), t = t0;
    uint64_t bytes = 0;
    int inflight = depth;
    while (inflight) {
        struct io_uring_cqe *cqe;
        int rc = io_uring_wait_cqe(&p->ring, &cqe);
        if (rc == -EINTR) continue;
        if (rc < 0 || cqe->res < 0)
            return sl_errf(err, "disk probe: read failed: %s", strerror(rc < 0 ? -rc : -cqe->res));
        bytes += (uint64_t)cqe->res;
        int slot = (int)io_uring_cqe_get_data64(cqe);
        io_uring_cqe_seen(&p->ring, cqe);
        inflight--;
        t = sl_now();
        if (t - t0 < seconds) {
            submit_one(p, slot);
            io_uring_submit(&p->ring);
            inflight++;
        }
    }
    out->bytes = bytes;
    out->seconds = t - t0;
    out->gbps = out->seconds > 0 ? (double)bytes / out->seconds / 1e9 : 0;
    return 0;
}

int disk_probe(const char *path, uint32_t read_size, int depth, double seconds, probe_result *out, sl_err *err)
{
    prober p = {.size = (read_size + 4095) & ~4095u, .rng = 0x2545f4914f6cdd1dull};
    *out = (probe_result){.read_size = p.size, .depth = depth, .direct = 1};
    p.fd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
    if (p.fd < 0 && errno == EINVAL) out->direct = 0, p.fd = open(path, O_RDONLY | O_CLOEXEC);
    if (p.fd < 0) return sl_errf(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    int rc = fstat(p.fd, &st);
    if (rc || (uint64_t)st.st_size < (uint64_t)p.size * 2) {
        close(p.fd);
        return sl_errf(err, "%s: too small for a disk probe", path);
    }
    p.span = (uint64_t)st.st_size - p.size;
    p.buf = mmap(NULL, (size_t)p.size * (size_t)depth, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    rc = p.buf == MAP_FAILED ? sl_errf(err, "disk probe: out of memory") : 0;
    if (!rc && (rc = io_uring_queue_init((unsigned)depth, &p.ring, 0)) < 0)
        rc = sl_errf(err, "disk probe: io_uring unavailable: %s", strerror(-rc));
    if (!rc) {
        rc = run(&p, depth, seconds, out, err);
        io_uring_queue_exit(&p.ring);
    }
    if (p.buf != MAP_FAILED) munmap(p.buf, (size_t)p.size * (size_t)depth);
    close(p.fd);
    return rc;
}
