/* Grammar-constrained decoding: a GBNF parser and an incremental matcher.
 *
 * The syntax is llama.cpp's GBNF:
 *   name ::= alternative | alternative ...     (one rule per line; "root" starts)
 *   "literal" with escapes \n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH
 *   [a-z0-9_] character classes with ranges, [^...] negated, . any character
 *   ( ... ) groups, and the postfix operators * + ? {m} {m,} {m,n}
 *   # comments to the end of the line; newlines inside ( ) and after | or ::=
 * (and a line starting with | continues the rule above it).
 *
 * The matcher works on Unicode code points.  Its state is a set of stacks;
 * a stack is the list of grammar positions still to match, innermost on
 * top, and every stack's top is a character class (an empty stack means the
 * grammar has matched a whole "root").  Each code point replaces the set by
 * the stacks whose top class holds it, advanced and expanded through rule
 * references.  A token's bytes may end inside a UTF-8 sequence: the bytes
 * so far are kept, and such a token is allowed if the code points it could
 * become meet a class on top of some stack (llama.cpp does the same).
 *
 * Repetitions become generated rules as in llama.cpp (S* is R ::= S R | "").
 * Left recursion (a rule reaching itself before matching a character) is
 * refused when parsing, since the matcher would expand it forever. */
#ifndef SLUICE_GRAMMAR_H
#define SLUICE_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

typedef struct sl_grammar sl_grammar;
typedef struct gram_state gram_state;

/* Parses LEN bytes of GBNF TEXT.  Errors read "grammar:LINE:COLUMN: what". */
int grammar_parse(sl_grammar **out, const char *text, size_t len, sl_err *err);
/* A grammar is shared by the states made from it: each holds a reference,
 * and grammar_free drops one (the last frees it).  One thread at a time. */
void grammar_ref(sl_grammar *g);
void grammar_free(sl_grammar *g);
size_t grammar_n_rules(const sl_grammar *g);

/* A matcher at the start of G's root rule (holds a reference to G). */
int gstate_new(gram_state **out, sl_grammar *g, sl_err *err);
void gstate_free(gram_state *m);
/* The grammar M was made from. */
sl_grammar *gstate_grammar(const gram_state *m);
/* DST (made from the same grammar) takes SRC's state; -1 out of memory. */
int gstate_copy(gram_state *dst, const gram_state *src);
/* Whether the bytes so far form a whole match of root (generation may end). */
bool gstate_can_end(const gram_state *m);
/* Whether N bytes may come next (the state is not changed). */
bool gstate_allows(gram_state *m, const char *bytes, size_t n);
/* Advances over N bytes: 0, 1 if they are not allowed (state unchanged),
 * -1 if out of memory or too ambiguous (state unchanged). */
int gstate_accept(gram_state *m, const char *bytes, size_t n);

/* Whole-string check: whether TEXT is a complete match of G's root. */
bool grammar_accepts(sl_grammar *g, const char *text, size_t len);

/* The vocabulary as a grammar-constrained sampler sees it: each token's
 * bytes (empty for control tokens, which a grammar never allows) and which
 * tokens end generation (allowed only when the grammar can end). */
typedef struct {
    int32_t n;
    const char *bytes;   /* every token's bytes, back to back */
    const uint32_t *off; /* token i is bytes[off[i], off[i+1]) */
    const uint8_t *eog;  /* nonzero for end-of-generation tokens */
} gram_tokens;

/* Whether token ID may come next under M. */
bool gstate_allows_token(gram_state *m, const gram_tokens *t, int32_t id);

#endif
