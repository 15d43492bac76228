/* Pieces of text during pre-tokenization, and the hand-written splitters
 * llama.cpp uses for some patterns (split_custom.c). */
#ifndef SLUICE_PRETOK_SPLIT_H
#define SLUICE_PRETOK_SPLIT_H

#include <stddef.h>
#include <stdint.h>

/* consecutive pieces of the code point sequence, by length */
typedef struct {
    size_t *len;
    size_t n, cap;
} seg_list;

/* Appends a piece (an empty one is dropped); -1 when out of memory. */
int seg_push(seg_list *s, size_t len);

typedef enum {
    CUSTOM_GPT2, CUSTOM_LLAMA3, CUSTOM_QWEN2, CUSTOM_QWEN35, CUSTOM_KIMI_K2, CUSTOM_DIGITS3, CUSTOM_NEWLINES
} custom_kind;

/* Splits code points [ini, end) of CPT (flags FL) into OUT. */
int split_custom(custom_kind kind, const uint32_t *cpt, const uint16_t *fl, size_t ini, size_t end, seg_list *out);

#endif
