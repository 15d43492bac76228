/* GGUF reader (v2 and v3, split models).  Metadata and tensor infos are read
 * eagerly and checked: every count, length and offset is validated against
 * the file size with overflow-safe arithmetic before anything is allocated or
 * read.  Tensor data is never loaded here; callers read byte ranges (pread),
 * which is what lets the expert store stream slices of expert tensors. */
#ifndef SLUICE_GGUF_H
#define SLUICE_GGUF_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf/ggml_type.h"
#include "util/err.h"

typedef enum {
    GGUF_UINT8 = 0, GGUF_INT8 = 1, GGUF_UINT16 = 2, GGUF_INT16 = 3,
    GGUF_UINT32 = 4, GGUF_INT32 = 5, GGUF_FLOAT32 = 6, GGUF_BOOL = 7,
    GGUF_STRING = 8, GGUF_ARRAY = 9, GGUF_UINT64 = 10, GGUF_INT64 = 11,
    GGUF_FLOAT64 = 12, GGUF_NTYPES = 13
} gguf_vtype;

/* A string from the file: `s` is NUL-terminated for convenience but may hold
 * embedded NULs, so `len` is authoritative. */
typedef struct {
    char *s;
    uint64_t len;
} gguf_str;

typedef struct gguf_value {
    gguf_vtype type;
    union {
        uint64_t u;   /* unsigned integers and bool */
        int64_t i;    /* signed integers */
        double f;     /* FLOAT32 / FLOAT64 */
        gguf_str str;
        struct {
            gguf_vtype type;
            uint64_t n;
            /* scalars: packed little-endian elements of their file size;
             * strings: gguf_str[n]; arrays: gguf_value[n] */
            void *data;
        } arr;
    };
} gguf_value;

typedef struct {
    char *key;
    gguf_value v;
    uint64_t offset; /* byte offset of the key in its file, for messages */
} gguf_kv;

typedef struct {
    char *name;
    uint32_t n_dims;
    int64_t ne[4];     /* element counts, innermost first; unused dims are 1 */
    uint32_t type;     /* ggml_type */
    uint64_t offset;   /* relative to its file's data section */
    uint64_t file_off; /* absolute offset in its file */
    uint64_t nbytes;
    uint32_t file;     /* index into gguf_file.files (split part) */
} gguf_tensor;

typedef struct {
    char *path;
    int fd;
    uint64_t size;
    uint64_t data_off;
} gguf_part;

typedef struct gguf_file {
    char *path;
    uint32_t version;
    uint32_t alignment;
    uint64_t n_kv;
    gguf_kv *kv;
    uint64_t n_tensors;
    gguf_tensor *tensors;
    uint32_t n_parts;
    gguf_part *parts;
    struct gguf_index *kv_index, *tensor_index;
} gguf_file;

/* Opens PATH (the first part of a split model opens all parts). */
int gguf_open(gguf_file **out, const char *path, sl_err *err);
void gguf_close(gguf_file *g);

const char *gguf_vtype_name(gguf_vtype t);

/* Key lookup; NULL when absent. */
const gguf_kv *gguf_find(const gguf_file *g, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *g, const char *name);

/* Typed getters return 1 when found, 0 when absent (out untouched) and -1
 * (message names the key and the type found) when the value does not fit. */
int gguf_get_u64(const gguf_file *g, const char *key, uint64_t *out, sl_err *err);
int gguf_get_u32(const gguf_file *g, const char *key, uint32_t *out, sl_err *err);
int gguf_get_i64(const gguf_file *g, const char *key, int64_t *out, sl_err *err);
int gguf_get_f32(const gguf_file *g, const char *key, float *out, sl_err *err);
int gguf_get_bool(const gguf_file *g, const char *key, bool *out, sl_err *err);
int gguf_get_str(const gguf_file *g, const char *key, const gguf_str **out, sl_err *err);
/* Array of the given element type; for GGUF_STRING *data is gguf_str[]. */
int gguf_get_arr(const gguf_file *g, const char *key, gguf_vtype elem,
                 const void **data, uint64_t *n, sl_err *err);

/* Element I of a scalar array, widened into a gguf_value (zero if out of range). */
gguf_value gguf_arr_scalar(const gguf_value *arr, uint64_t i);

/* Bytes of one element of a scalar type (0 for STRING/ARRAY). */
uint32_t gguf_scalar_size(gguf_vtype t);

/* Reads LEN bytes at OFF within tensor T's data into DST; a short read or an
 * I/O error is an error naming file and offset. */
int gguf_read_tensor(const gguf_file *g, const gguf_tensor *t, uint64_t off,
                     void *dst, uint64_t len, sl_err *err);

#endif
