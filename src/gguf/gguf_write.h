/* GGUF writer.  Metadata (key/values and tensor infos) is encoded into memory
 * as it is added; gguf_w_open then writes the header and gguf_w_write streams
 * the tensor data in declaration order, inserting the alignment padding, so a
 * file of any size needs only the output buffer in RAM.
 *
 * The same writer builds deliberately damaged files for the reader's tests:
 * gguf_w_tensor_raw and gguf_w_kv_raw take anything (unknown types, any
 * offset, names with NULs), gguf_w_override_header lies about the magic,
 * version or counts, and gguf_w_write_raw appends bytes as-is.
 *
 * Values are written little-endian (the host order on every target sluice
 * builds for). */
#ifndef SLUICE_GGUF_WRITE_H
#define SLUICE_GGUF_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "util/err.h"

typedef struct gguf_writer gguf_writer;

typedef struct {
    uint32_t version;   /* 0 means 3 */
    uint32_t alignment; /* 0 means 32; any other value is also written as general.alignment */
    size_t buf_bytes;   /* output buffer; 0 means 8 MiB */
    bool background;    /* a writer thread overlaps write() with the caller producing data */
    bool drop_cache;    /* write back and drop finished ranges from the page cache as the
                           file grows, so a huge file neither fills RAM with dirty pages
                           nor evicts everyone else's cache */
    bool sync;          /* fdatasync before gguf_w_close returns */
    bool direct;        /* O_DIRECT where the filesystem allows it (else as if false):
                           no page-cache copy, the disk's own speed */
} gguf_w_opts;

/* NULL opts means all defaults.  Returns NULL when out of memory. */
gguf_writer *gguf_w_new(const gguf_w_opts *opts);
/* Frees everything; an output still open is closed as it is (partial). */
void gguf_w_free(gguf_writer *w);

/* ---- metadata (before gguf_w_open) ---- */

/* Any value as the reader represents it (deep copy; nested arrays, strings
 * with NULs).  Duplicate keys are an error. */
int gguf_w_kv(gguf_writer *w, const char *key, const gguf_value *v, sl_err *err);
int gguf_w_kv_u32(gguf_writer *w, const char *key, uint32_t v, sl_err *err);
int gguf_w_kv_i32(gguf_writer *w, const char *key, int32_t v, sl_err *err);
int gguf_w_kv_u64(gguf_writer *w, const char *key, uint64_t v, sl_err *err);
int gguf_w_kv_f32(gguf_writer *w, const char *key, float v, sl_err *err);
int gguf_w_kv_bool(gguf_writer *w, const char *key, bool v, sl_err *err);
int gguf_w_kv_str(gguf_writer *w, const char *key, const char *s, sl_err *err);
int gguf_w_kv_str_n(gguf_writer *w, const char *key, const char *s, uint64_t len, sl_err *err);
/* Array of N elements of a scalar type (DATA packed little-endian, the
 * element's file size each) or of strings (DATA is gguf_str[N]). */
int gguf_w_kv_arr(gguf_writer *w, const char *key, gguf_vtype elem, const void *data, uint64_t n,
                  sl_err *err);
/* Unchecked: KEY_LEN bytes of key, then TYPE, then LEN bytes of encoded value. */
int gguf_w_kv_raw(gguf_writer *w, const char *key, uint64_t key_len, uint32_t type, const void *value,
                  size_t len, sl_err *err);

/* A tensor of a known ggml type; the shape must suit its blocks.  Data
 * offsets are assigned in call order, each aligned.  Returns its index. */
int gguf_w_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims, const int64_t *ne,
                  sl_err *err);
/* Unchecked tensor info: any name bytes, dims, type and data offset.  A file
 * with raw tensors gets its data through gguf_w_write_raw only. */
int gguf_w_tensor_raw(gguf_writer *w, const char *name, uint64_t name_len, uint32_t n_dims,
                      const uint64_t *ne, uint32_t type, uint64_t offset, sl_err *err);

/* Header fields to write instead of the true ones (NULL magic keeps "GGUF"). */
void gguf_w_override_header(gguf_writer *w, const char *magic4, uint32_t version, uint64_t n_tensors,
                            uint64_t n_kv);

uint64_t gguf_w_n_tensors(const gguf_writer *w);
uint64_t gguf_w_n_kv(const gguf_writer *w);
/* Bytes before the data section (header, metadata, tensor infos, padding). */
uint64_t gguf_w_data_offset(const gguf_writer *w);
/* The whole file's size once every tensor is written (checked tensors only). */
uint64_t gguf_w_file_size(const gguf_writer *w);

/* ---- output ---- */

/* Creates (truncates) PATH and writes everything before the tensor data. */
int gguf_w_open(gguf_writer *w, const char *path, sl_err *err);
/* Next LEN bytes of tensor data, continuing across tensors in declaration
 * order; more bytes than the tensors hold is an error. */
int gguf_w_write(gguf_writer *w, const void *data, size_t len, sl_err *err);
/* Bytes appended as they are, wherever the output stands. */
int gguf_w_write_raw(gguf_writer *w, const void *data, size_t len, sl_err *err);
/* Bytes of tensor data written so far (excluding padding). */
uint64_t gguf_w_data_written(const gguf_writer *w);
/* Flushes, pads the end to the alignment and closes.  Missing tensor data
 * is an error naming the first incomplete tensor. */
int gguf_w_close(gguf_writer *w, sl_err *err);

#endif
