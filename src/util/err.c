#include "util/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int sl_errf(sl_err *err, const char *fmt, ...)
{
    if (!err) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return -1;
}

int sl_err_wrap(sl_err *err, const char *fmt, ...)
{
    if (!err) return -1;
    char prefix[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(prefix, sizeof prefix - 2, fmt, ap);
    va_end(ap);
    if (n < 0) return -1;
    size_t plen = strlen(prefix);
    memcpy(prefix + plen, ": ", 3);
    plen += 2;
    size_t old = strnlen(err->msg, sizeof err->msg - 1);
    if (plen + old >= sizeof err->msg) old = sizeof err->msg - 1 - plen;
    memmove(err->msg + plen, err->msg, old);
    memcpy(err->msg, prefix, plen);
    err->msg[plen + old] = 0;
    return -1;
}
