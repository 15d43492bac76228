/* Test-only I/O fault injection.
 *
 * Built with -DSLUICE_TEST_FAULTS (libsluice-test.a, sluice-test, every test
 * program), each read, write, fsync, rename and io_uring completion the
 * library makes through the wrappers below is counted per operation, and
 * the N-th of one chosen operation can be made to fail with a chosen errno
 * (EIO, EINTR, EAGAIN, ENOSPC, ...) or to come back short.  The release
 * build (libsluice.a, sluice) compiles the wrappers to the plain system
 * calls: no counter, no symbol, no environment variable is read.
 *
 * Arming: sl_fault_arm() in a test program, or in any process of the test
 * build the environment variable SLUICE_FAULT=OP:N:KIND (OP read, write,
 * fsync, rename, uring; KIND an errno name or "short"), read at the first
 * counted operation.  A short transfer is half the length, rounded down to
 * 4096 bytes so an O_DIRECT remainder stays aligned; transfers of less than
 * 8 KiB are never made short.  Only the N-th operation is affected: a retry
 * of it is operation N+1 and goes through.
 *
 * The counters are process-wide on purpose (the one mutable global of the
 * test build): a fault must reach code that no test can hand a pointer to. */
#ifndef SLUICE_FAULT_H
#define SLUICE_FAULT_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <unistd.h>

typedef enum {
    SL_FAULT_READ,
    SL_FAULT_WRITE,
    SL_FAULT_FSYNC,
    SL_FAULT_RENAME,
    SL_FAULT_URING, /* an io_uring completion */
    SL_FAULT_N_OPS
} sl_fault_op;

enum { SL_FAULT_SHORT = -1 }; /* KIND for sl_fault_arm: a short transfer */

#ifdef SLUICE_TEST_FAULTS

/* Counts one OP of *LEN bytes.  Returns 0 to go ahead (with *LEN possibly
 * reduced: a short transfer), or the errno the operation must fail with. */
int sl_fault_hit(sl_fault_op op, size_t *len);
/* Fails the N-th OP counted from now (N >= 1) with errno KIND, or makes it
 * short (KIND = SL_FAULT_SHORT); N = 0 disarms.  Resets every counter. */
void sl_fault_arm(sl_fault_op op, long n, int kind);
/* OPs counted since the last sl_fault_arm. */
long sl_fault_count(sl_fault_op op);
/* Whether the armed fault has happened. */
int sl_fault_fired(void);
/* "read", "write", ...; and the inverse (-1 if unknown). */
const char *sl_fault_op_name(sl_fault_op op);
int sl_fault_op_parse(const char *name);

#else

static inline int sl_fault_hit(sl_fault_op op, size_t *len)
{
    (void)op, (void)len;
    return 0;
}

#endif

/* ---- the wrappers: identical to the system calls in a release build ---- */

static inline ssize_t sl_sys_pread(int fd, void *buf, size_t len, off_t off)
{
    int e = sl_fault_hit(SL_FAULT_READ, &len);
    if (e) return errno = e, -1;
    return pread(fd, buf, len, off);
}

static inline ssize_t sl_sys_read(int fd, void *buf, size_t len)
{
    int e = sl_fault_hit(SL_FAULT_READ, &len);
    if (e) return errno = e, -1;
    return read(fd, buf, len);
}

static inline ssize_t sl_sys_write(int fd, const void *buf, size_t len)
{
    int e = sl_fault_hit(SL_FAULT_WRITE, &len);
    if (e) return errno = e, -1;
    return write(fd, buf, len);
}

static inline ssize_t sl_sys_pwrite(int fd, const void *buf, size_t len, off_t off)
{
    int e = sl_fault_hit(SL_FAULT_WRITE, &len);
    if (e) return errno = e, -1;
    return pwrite(fd, buf, len, off);
}

static inline int sl_sys_fsync(int fd)
{
    size_t none = 0;
    int e = sl_fault_hit(SL_FAULT_FSYNC, &none);
    if (e) return errno = e, -1;
    return fsync(fd);
}

static inline int sl_sys_fdatasync(int fd)
{
    size_t none = 0;
    int e = sl_fault_hit(SL_FAULT_FSYNC, &none);
    if (e) return errno = e, -1;
    return fdatasync(fd);
}

static inline int sl_sys_rename(const char *from, const char *to)
{
    size_t none = 0;
    int e = sl_fault_hit(SL_FAULT_RENAME, &none);
    if (e) return errno = e, -1;
    return rename(from, to);
}

/* fwrite / fread of N items of SIZE bytes: a fault fails the whole call
 * (no item transferred, ferror-like errno), a short one transfers half. */
static inline size_t sl_sys_fwrite(const void *p, size_t size, size_t n, FILE *f)
{
    size_t len = size * n;
    int e = sl_fault_hit(SL_FAULT_WRITE, &len);
    if (e) return errno = e, 0;
    return fwrite(p, size, size ? len / size : 0, f);
}

static inline size_t sl_sys_fread(void *p, size_t size, size_t n, FILE *f)
{
    size_t len = size * n;
    int e = sl_fault_hit(SL_FAULT_READ, &len);
    if (e) return errno = e, 0;
    return fread(p, size, size ? len / size : 0, f);
}

/* Whether a failed transfer is worth retrying as it is. */
static inline int sl_errno_transient(int e) { return e == EINTR || e == EAGAIN; }

#endif
