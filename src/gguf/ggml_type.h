/* ggml tensor types as stored in GGUF files: ids, names, block geometry.
 * Ids and block sizes follow ggml.h / ggml-common.h; the table is what lets
 * the reader compute (and check) every tensor's byte size. */
#ifndef SLUICE_GGML_TYPE_H
#define SLUICE_GGML_TYPE_H

#include <stdbool.h>
#include <stdint.h>

typedef enum {
    GGML_TYPE_F32 = 0, GGML_TYPE_F16 = 1, GGML_TYPE_Q4_0 = 2, GGML_TYPE_Q4_1 = 3,
    GGML_TYPE_Q5_0 = 6, GGML_TYPE_Q5_1 = 7, GGML_TYPE_Q8_0 = 8, GGML_TYPE_Q8_1 = 9,
    GGML_TYPE_Q2_K = 10, GGML_TYPE_Q3_K = 11, GGML_TYPE_Q4_K = 12, GGML_TYPE_Q5_K = 13,
    GGML_TYPE_Q6_K = 14, GGML_TYPE_Q8_K = 15, GGML_TYPE_IQ2_XXS = 16, GGML_TYPE_IQ2_XS = 17,
    GGML_TYPE_IQ3_XXS = 18, GGML_TYPE_IQ1_S = 19, GGML_TYPE_IQ4_NL = 20, GGML_TYPE_IQ3_S = 21,
    GGML_TYPE_IQ2_S = 22, GGML_TYPE_IQ4_XS = 23, GGML_TYPE_I8 = 24, GGML_TYPE_I16 = 25,
    GGML_TYPE_I32 = 26, GGML_TYPE_I64 = 27, GGML_TYPE_F64 = 28, GGML_TYPE_IQ1_M = 29,
    GGML_TYPE_BF16 = 30, GGML_TYPE_TQ1_0 = 34, GGML_TYPE_TQ2_0 = 35, GGML_TYPE_MXFP4 = 39,
    GGML_TYPE_NVFP4 = 40, GGML_TYPE_Q1_0 = 41, GGML_TYPE_Q2_0 = 42,
    GGML_TYPE_COUNT = 43
} ggml_type;

typedef struct {
    const char *name;    /* lower-case ggml name, e.g. "q4_K" */
    uint32_t blck_size;  /* elements per block */
    uint32_t type_size;  /* bytes per block */
} ggml_type_info;

/* NULL for ids that are unknown, removed or out of range. */
const ggml_type_info *ggml_type_get(uint32_t type);

/* Name for printing; "unknown(N)" style text lives in a caller buffer. */
const char *ggml_type_name(uint32_t type);

/* Bytes of a row of n elements; 0 if the type is unknown or n is not a
 * multiple of the block size. */
uint64_t ggml_row_bytes(uint32_t type, uint64_t n);

/* Case-insensitive lookup by name ("Q4_K", "q8_0", "bf16"); -1 if unknown. */
int ggml_type_from_name(const char *name);

#endif
