/* Whole-range reads: a short read is an error, never a partial result. */
#ifndef SLUICE_FILEIO_H
#define SLUICE_FILEIO_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

/* Reads exactly LEN bytes at OFF; EINTR, EAGAIN and short reads are
 * retried, EOF or an I/O error is reported with PATH and the failing offset. */
int sl_pread_full(int fd, void *buf, size_t len, uint64_t off, const char *path, sl_err *err);

/* Writes exactly LEN bytes (EINTR, EAGAIN and short writes retried); an
 * error names PATH and how far the write got. */
int sl_write_full(int fd, const void *buf, size_t len, const char *path, sl_err *err);

/* fsync, fdatasync and rename, retried while they fail with EINTR or
 * EAGAIN (0, or -1 with errno set). */
int sl_fsync_retry(int fd);
int sl_fdatasync_retry(int fd);
int sl_rename_retry(const char *from, const char *to);

/* Reads a whole (small) file into a NUL-terminated heap buffer. */
int sl_read_file(const char *path, char **out, size_t *len, sl_err *err);

#endif
