/* The session's KV cache as bytes, for saved contexts (sluice_state_save):
 * the KV rows of positions [0, pos) of every layer.  The layout word tells
 * whether a file's rows fit this session (layers, row widths, element
 * size).  Recurrent state is session_kv_write's (model.h). */
#ifndef SLUICE_SESSION_IO_H
#define SLUICE_SESSION_IO_H

#include <stddef.h>
#include <stdint.h>

#include "arch/model.h"

typedef int (*session_put_fn)(void *ud, const void *p, size_t n);
typedef int (*session_get_fn)(void *ud, void *p, size_t n);

/* A hash of everything the byte layout depends on. */
uint64_t session_kv_layout(const sl_session *s);
/* Bytes session_kv_write produces for N positions. */
uint64_t session_kv_size(const sl_session *s, int32_t n);
/* Writes the state of the first N positions through PUT. */
int session_kv_write(const sl_session *s, int32_t n, session_put_fn put, void *ud, sl_err *err);
/* Reads N positions' state through GET; the session then holds N tokens.
 * On failure the session holds none. */
int session_kv_read(sl_session *s, int32_t n, session_get_fn get, void *ud, sl_err *err);

#endif
