#ifndef SLUICE_UTIL_HEAP_H
#define SLUICE_UTIL_HEAP_H
/* A binary min-heap over a growable array, generated per element type so
 * the comparison inlines (the tokenizers' merge loops pop one per merge).
 * HEAP_DEFINE(NAME, STATE, ELEM, BEFORE, CAP0) defines
 *   static int  NAME_push(STATE *s, ELEM e)   (-1: out of memory)
 *   static ELEM NAME_pop(STATE *s)            (s->nheap > 0)
 * over STATE's fields `ELEM *heap; size_t nheap, heapcap;`, where
 * BEFORE(const ELEM *a, const ELEM *b) says a comes out first. */
#include <stdlib.h>

#define HEAP_DEFINE(NAME, STATE, ELEM, BEFORE, CAP0)                                    \
    static int NAME##_push(STATE *s, ELEM e)                                            \
    {                                                                                   \
        if (s->nheap == s->heapcap) {                                                   \
            size_t cap = s->heapcap ? s->heapcap * 2 : (CAP0);                          \
            ELEM *h = realloc(s->heap, cap * sizeof *h);                                \
            if (!h) return -1;                                                          \
            s->heap = h;                                                                \
            s->heapcap = cap;                                                           \
        }                                                                               \
        size_t i = s->nheap++;                                                          \
        while (i > 0 && BEFORE(&e, &s->heap[(i - 1) / 2])) {                            \
            s->heap[i] = s->heap[(i - 1) / 2];                                          \
            i = (i - 1) / 2;                                                            \
        }                                                                               \
        s->heap[i] = e;                                                                 \
        return 0;                                                                       \
    }                                                                                   \
    static ELEM NAME##_pop(STATE *s)                                                    \
    {                                                                                   \
        ELEM top = s->heap[0], last = s->heap[--s->nheap];                              \
        size_t i = 0;                                                                   \
        for (;;) {                                                                      \
            size_t c = 2 * i + 1;                                                       \
            if (c >= s->nheap) break;                                                   \
            if (c + 1 < s->nheap && BEFORE(&s->heap[c + 1], &s->heap[c])) c++;          \
            if (!BEFORE(&s->heap[c], &last)) break;                                     \
            s->heap[i] = s->heap[c];                                                    \
            i = c;                                                                      \
        }                                                                               \
        if (s->nheap) s->heap[i] = last;                                                \
        return top;                                                                     \
    }

#endif
