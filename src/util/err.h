/* Errors travel as a caller-owned message buffer: a failing function fills it
 * with what failed (file, tensor, field, byte offset, errno) and returns -1.
 * Nothing below the CLI prints or exits, so the server can map errors to
 * responses and tests can check the exact message. */
#ifndef SLUICE_ERR_H
#define SLUICE_ERR_H

#include <stddef.h>

typedef struct sl_err {
    char msg[1024];
} sl_err;

/* Formats into err (if non-NULL) and returns -1 so callers can write
 * `return sl_errf(err, ...)`. */
int sl_errf(sl_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prepends "context: " to an existing message, for adding the outer frame. */
int sl_err_wrap(sl_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
