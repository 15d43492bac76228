/* The parsed grammar, shared by the parser (grammar_parse.c) and the
 * matcher (grammar.c). */
#ifndef SLUICE_GRAMMAR_INT_H
#define SLUICE_GRAMMAR_INT_H

#include "decode/grammar.h"

/* An element of a rule body.  A rule is its alternatives' elements, each
 * alternative ended by G_ALT, the last by G_END, so a position whose
 * element is G_ALT or G_END is the end of an alternative. */
enum { G_END, G_ALT, G_REF, G_SET };

typedef struct {
    uint32_t type; /* G_* */
    uint32_t v;    /* G_REF: the rule; G_SET: the character class */
} gelem;

typedef struct {
    uint32_t lo, hi; /* code points, inclusive */
} grange;

/* A character class: ranges[first, first + n), or their complement. */
typedef struct {
    uint32_t first, n;
    bool neg;
} gset;

struct sl_grammar {
    int refs;
    gelem *el;
    size_t n_el;
    uint32_t *alt;      /* first position of each alternative, rule by rule */
    uint32_t *alt_off;  /* rule r's alternatives: alt[alt_off[r], alt_off[r + 1]) */
    size_t n_rules;
    grange *rg;
    gset *sets;
    uint32_t root;
};

#endif
