#include "util/fileio.h"
#include "util/fault.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int sl_pread_full(int fd, void *buf, size_t len, uint64_t off, const char *path, sl_err *err)
{
    size_t done = 0;
    while (done < len) {
        ssize_t n = sl_sys_pread(fd, (char *)buf + done, len - done, (off_t)(off + done));
        if (n < 0 && sl_errno_transient(errno)) continue;
        if (n < 0)
            return sl_errf(err, "%s: read of %zu bytes at offset %llu failed: %s", path,
                           len - done, (unsigned long long)(off + done), strerror(errno));
        if (n == 0)
            return sl_errf(err, "%s: short read at offset %llu (wanted %zu more bytes; file truncated?)",
                           path, (unsigned long long)(off + done), len - done);
        done += (size_t)n;
    }
    return 0;
}

int sl_write_full(int fd, const void *buf, size_t len, const char *path, sl_err *err)
{
    size_t done = 0;
    while (done < len) {
        ssize_t n = sl_sys_write(fd, (const char *)buf + done, len - done);
        if (n < 0 && sl_errno_transient(errno)) continue;
        if (n <= 0)
            return sl_errf(err, "%s: write of %zu bytes at byte %zu of %zu failed: %s", path, len - done, done, len,
                           n < 0 ? strerror(errno) : "no progress");
        done += (size_t)n;
    }
    return 0;
}

enum { MAX_TRIES = 16 }; /* transient failures in a row before the errno stands */

int sl_fsync_retry(int fd)
{
    int rc, tries = 0;
    while ((rc = sl_sys_fsync(fd)) != 0 && sl_errno_transient(errno) && ++tries < MAX_TRIES) {}
    return rc;
}

int sl_fdatasync_retry(int fd)
{
    int rc, tries = 0;
    while ((rc = sl_sys_fdatasync(fd)) != 0 && sl_errno_transient(errno) && ++tries < MAX_TRIES) {}
    return rc;
}

int sl_rename_retry(const char *from, const char *to)
{
    int rc, tries = 0;
    while ((rc = sl_sys_rename(from, to)) != 0 && sl_errno_transient(errno) && ++tries < MAX_TRIES) {}
    return rc;
}

int sl_read_file(const char *path, char **out, size_t *len, sl_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return sl_errf(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return sl_errf(err, "%s: cannot stat: %s", path, strerror(errno));
    }
    char *buf = malloc((size_t)st.st_size + 1);
    if (!buf) {
        close(fd);
        return sl_errf(err, "%s: out of memory reading %lld bytes", path, (long long)st.st_size);
    }
    int rc = sl_pread_full(fd, buf, (size_t)st.st_size, 0, path, err);
    close(fd);
    if (rc) {
        free(buf);
        return rc;
    }
    buf[st.st_size] = 0;
    *out = buf;
    if (len) *len = (size_t)st.st_size;
    return 0;
}
