/* A Jinja2 subset interpreter for chat templates: lexer (jinja_lex.c), parser
 * to an AST (jinja_parse.c), evaluator (jinja_eval.c) with filters, tests and
 * methods (jinja_builtins.c), values (jinja_value.c) and JSON (jinja_json.c).
 *
 * Semantics follow Python Jinja2 configured the way Hugging Face transformers
 * renders chat templates (ImmutableSandboxedEnvironment, trim_blocks,
 * lstrip_blocks, loopcontrols, tojson with ensure_ascii=False): values print
 * the way Python's str() prints them, undefined values are the default
 * (lenient) Undefined, and mutating list/dict methods are refused like the
 * immutable sandbox refuses them.  Templates come from untrusted files, so
 * every recursion, loop and allocation is bounded (jinja_limits). */
#ifndef SLUICE_JINJA_H
#define SLUICE_JINJA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "util/err.h"

/* ---- values ---------------------------------------------------------- */

typedef enum {
    JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT, JV_FUNC
} jv_kind;

typedef struct jstr jstr;
typedef struct jlist jlist;
typedef struct jdict jdict;
typedef struct jfunc jfunc;

/* A value.  Heap kinds are reference counted; a jv returned by a function is
 * a new reference the caller must jv_drop, arguments are borrowed. */
typedef struct jv {
    jv_kind k;
    uint8_t uk;           /* JV_UNDEF: JU_* kind (jinja_int.h); JV_STR: 1 for Markup
                           * (|safe, |escape), which escapes what is added to it */
    /* JV_UNDEF: what was looked up, for error messages ("'x' is undefined",
     * "'dict object' has no attribute 'x'", or a sandbox refusal). */
    const char *why;
    union {
        bool b;
        int64_t i;
        double f;
        jstr *s;      /* JV_STR; JV_UNDEF: the missing name (may be NULL) */
        jlist *l;
        jdict *d;
        jfunc *fn;
    };
} jv;

/* Freeing never recurses: a container whose count drops to zero joins a
 * work list (through its jgc) and its children are released from there,
 * so arbitrarily deep values cannot exhaust the stack. */
typedef struct jgc {
    struct jgc *next;
    int type;
} jgc;

/* Intrusive list of containers that can be changed after creation
 * (namespaces, scopes, loop states): the only places a reference cycle can
 * close.  The renderer empties whatever is still alive at the end. */
typedef struct jtrack {
    struct jtrack *prev, *next;
    int kind;
} jtrack;

struct jstr {
    int32_t rc;
    bool ascii;
    size_t len;   /* bytes */
    size_t ncp;   /* code points (invalid UTF-8 bytes count one each) */
    char s[];     /* NUL-terminated; may hold embedded NULs */
};

struct jlist {
    jgc gc;
    int32_t rc;
    bool tuple;
    bool gen;     /* a one-shot iterator (select, map, ...): no len(), no [i] */
    size_t pos;   /* gen: items consumed so far */
    size_t n, cap;
    jv *v;
};

struct jdict {
    jgc gc;
    jtrack tr;    /* linked only for namespaces */
    int32_t rc;
    bool ns;      /* namespace(): attribute assignment allowed */
    size_t n, cap;
    jv *k, *v;    /* insertion order */
};

static inline jv jv_undef(void) { return (jv){.k = JV_UNDEF}; }
static inline jv jv_none(void) { return (jv){.k = JV_NONE}; }
static inline jv jv_bool(bool b) { return (jv){.k = JV_BOOL, .b = b}; }
static inline jv jv_int(int64_t i) { return (jv){.k = JV_INT, .i = i}; }
static inline jv jv_float(double f) { return (jv){.k = JV_FLOAT, .f = f}; }

jv jv_ref(jv v);
void jv_drop(jv v);

/* Strings.  NULL returns mean out of memory. */
jstr *jstr_new(const char *s, size_t len);
jstr *jstr_cstr(const char *s);
jv jv_str(const char *s, size_t len);  /* JV_NONE on out of memory */
jv jv_cstr(const char *s);
jv jv_str_take(jstr *s);               /* wraps without a new reference */
/* Byte offset of code point I (I <= ncp). */
size_t jstr_cp_off(const jstr *s, size_t i);

/* Lists and dicts (new, empty, refcount 1). */
jlist *jlist_new(size_t cap);
int jlist_push(jlist *l, jv v);        /* takes v; -1 on out of memory */
jdict *jdict_new(void);
/* Sets K to V (takes both); -1 on out of memory. */
int jdict_set(jdict *d, jv k, jv v);
/* Borrowed value for K, or NULL. */
const jv *jdict_get(const jdict *d, jv k);
const jv *jdict_gets(const jdict *d, const char *key, size_t len);

/* Python semantics. */
bool jv_truthy(jv v);
bool jv_eq(jv a, jv b);
const char *jv_type_name(jv v);   /* Python type name: "str", "dict", ... */

/* Growable output buffer with a hard byte limit. */
typedef struct {
    char *p;
    size_t n, cap, max;
    bool over;    /* hit max (or out of memory) */
    bool oom;
} jbuf;

void jbuf_put(jbuf *b, const char *s, size_t n);
void jbuf_putc(jbuf *b, char c);
void jbuf_printf(jbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void jbuf_free(jbuf *b);

/* str(v) and repr(v) as Python prints them (lists print their items' repr). */
void jv_write_str(jbuf *b, jv v);
void jv_write_repr(jbuf *b, jv v);
/* Shortest round-trip float text as Python's repr(float). */
void jv_write_float(jbuf *b, double f);
/* JSON as Python's json.dumps(v, ensure_ascii, indent, separators,
 * sort_keys).  INDENT NULL: no newlines.  Returns -1 with a message in
 * ERRBUF (size ERRCAP) for values JSON cannot hold. */
typedef struct {
    bool ensure_ascii;
    const char *indent;      /* NULL or the per-level indent text */
    const char *item_sep;    /* NULL: ", " (or "," with indent) */
    const char *key_sep;     /* NULL: ": " */
    bool sort_keys;
} jjson_opts;
int jv_write_json(jbuf *b, jv v, const jjson_opts *o, int depth, char *errbuf, size_t errcap);

/* Python whitespace (str.isspace) for a code point. */
bool ju_isspace(uint32_t cp);
/* Decodes one code point at S (N bytes left); invalid bytes decode as
 * themselves with length 1.  Returns the length. */
size_t ju_decode(const char *s, size_t n, uint32_t *cp);
size_t ju_encode(uint32_t cp, char *out);
/* Length of the line break (Python's str.splitlines() set, "\r\n" as one)
 * at byte I of S (LEN bytes), 0 if none starts there. */
size_t ju_line_end(const char *s, size_t i, size_t len);

/* ---- templates ------------------------------------------------------- */

typedef struct jinja_tpl jinja_tpl;

typedef struct {
    size_t max_output;    /* bytes of output and of any one string */
    size_t max_items;     /* items in any list built while rendering */
    uint32_t max_depth;   /* nesting of evaluation (macros, calls, blocks) */
    uint64_t max_steps;   /* evaluation steps (nodes, loop turns, bytes / 64) */
} jinja_limits;

/* Parses SRC (LEN bytes).  Syntax errors and unsupported features name the
 * line and column. */
int jinja_parse(jinja_tpl **out, const char *src, size_t len, sl_err *err);
void jinja_free(jinja_tpl *t);

/* Renders with the variables of CTX (a dict; borrowed).  NOW is the time
 * strftime_now() reports.  *OUT is malloc'd and NUL-terminated. */
int jinja_render(const jinja_tpl *t, const jdict *ctx, const struct tm *now, const jinja_limits *lim,
                 char **out, size_t *out_len, sl_err *err);

/* Converts between jansson and values (jinja_json.c). */
struct json_t;
int jv_from_json(jv *out, const struct json_t *j, int depth, sl_err *err);

#endif
