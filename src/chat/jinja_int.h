/* Internals shared by the jinja_*.c files: tokens, AST, the render context
 * and the builtin tables.  Nothing outside src/chat includes this. */
#ifndef SLUICE_JINJA_INT_H
#define SLUICE_JINJA_INT_H

#include "chat/jinja.h"

/* Return code of jinja_parse / jinja_render when the template uses a
 * feature this interpreter does not have (the message says which). */
#define JINJA_UNSUPPORTED (-2)

/* ---- values (jinja_value.c) -------------------------------------------- */

void jstr_scan(jstr *s);
void jtrack_link(jtrack *head, jtrack *t, int kind);
void jtrack_unlink(jtrack *t);
enum { JT_NS = 1, JT_SCOPE, JT_LOOP };

/* Heap objects other than strings carry a jgc tagged with their type. */
enum { GC_LIST = 1, GC_DICT, GC_FUNC, GC_SCOPE, GC_LOOP };
/* Drops one reference (*RC) of the object behind G, freeing iteratively. */
void jgc_release(jgc *g, int32_t *rc);
/* Drops everything the object holds but keeps it (breaks cycles). */
void jgc_clear(jgc *g);
/* Recursion bound for printing and comparing nested values. */
#define JV_MAX_NEST 200

/* Undefined values remember why they are undefined (jv.why / jv.s). */
enum { JU_NAME = 0, JU_ATTR, JU_ELEM, JU_UNSAFE, JU_UNIMPL, JU_MSG };
jv jv_undef_why(int kind, const char *obj_type, jstr *name);
void jv_undef_message(jbuf *b, jv u);

/* ---- tokens (jinja_lex.c) ------------------------------------------- */

typedef enum {
    T_EOF, T_DATA, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END,
    T_NAME, T_STRING, T_INT, T_FLOAT, T_OP
} jtok_kind;

typedef enum {
    OP_ADD = 1, OP_SUB, OP_DIV, OP_FLOORDIV, OP_MUL, OP_MOD, OP_POW, OP_TILDE,
    OP_LBRACKET, OP_RBRACKET, OP_LPAREN, OP_RPAREN, OP_LBRACE, OP_RBRACE,
    OP_EQ, OP_NE, OP_GT, OP_GE, OP_LT, OP_LE, OP_ASSIGN, OP_DOT, OP_COLON,
    OP_PIPE, OP_COMMA, OP_SEMICOLON,
    /* comparison operators that are names in the source */
    OP_IN, OP_NOTIN
} jop;

typedef struct {
    jtok_kind k;
    jop op;
    uint32_t pos;          /* byte offset in the normalized source */
    const char *s;         /* T_NAME / T_DATA: text in the source */
    size_t n;
    jv val;                /* T_STRING / T_INT / T_FLOAT (strings immortal) */
} jtok;

/* An arena owns the AST and the strings it refers to. */
typedef struct jarena_blk {
    struct jarena_blk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} jarena_blk;

typedef struct {
    jarena_blk *head;
} jarena;

void *jarena_alloc(jarena *a, size_t n);
/* A string with a reference count that is never changed or freed (it lives
 * in the arena), so a parsed template can be shared between threads. */
jstr *jarena_str(jarena *a, const char *s, size_t len);
void jarena_free(jarena *a);

/* Tokenizes SRC (already newline-normalized).  *TOKS is malloc'd. */
int jinja_lex(const char *src, size_t len, jarena *a, jtok **toks, size_t *n, sl_err *err);

/* Decodes a string literal body (Python escapes).  WHY gets the problem. */
int jinja_unescape(const char *s, size_t n, jbuf *b, char *why, size_t whycap);

/* Line and column (1-based) of byte POS. */
void jinja_linecol(const char *src, size_t len, uint32_t pos, int *line, int *col);

/* ---- AST (jinja_parse.c) ----------------------------------------------- */

typedef enum {
    /* expressions */
    N_CONST, N_NAME, N_GETATTR, N_GETITEM, N_SLICE, N_CALL, N_FILTER, N_TEST,
    N_NOT, N_NEG, N_POS, N_BIN, N_AND, N_OR, N_CONCAT, N_COMPARE, N_COND,
    N_LIST, N_TUPLE, N_DICT,
    /* statements */
    N_DATA, N_OUTPUT, N_IF, N_FOR, N_SET, N_SETBLOCK, N_MACRO, N_CALLBLOCK,
    N_FILTERBLOCK, N_BREAK, N_CONTINUE, N_WITH, N_SCOPE
} jnode_kind;

/* Flags of N_MACRO / N_CALLBLOCK (which special names the body reads). */
enum { JM_CALLER = 1, JM_VARARGS = 2, JM_KWARGS = 4 };

typedef struct jnode jnode;
typedef struct jbuiltin jbuiltin;

struct jnode {
    jnode_kind kind;
    uint8_t op;            /* N_BIN operator, N_FOR recursive, N_MACRO flags */
    uint32_t pos;
    jnode *a, *b, *c;
    jnode **v;             /* items, arguments, body */
    jnode **w;             /* keyword values, dict values, else-body, defaults */
    jstr **names;          /* keyword names, parameters, targets */
    uint8_t *ops;          /* N_COMPARE operators, one per v[i] */
    uint32_t nv, nw, nnames;
    jstr *name;            /* N_NAME, attribute, filter/test/macro name, data */
    const jbuiltin *fn;    /* N_FILTER / N_TEST: resolved at parse time */
    jv val;                /* N_CONST */
};

struct jinja_tpl {
    char *src;             /* normalized source, for line/column */
    size_t len;
    jarena arena;
    jnode **body;
    uint32_t nbody;
};

/* ---- evaluation (jinja_eval.c) ---------------------------------------- */

#define JSCOPE_INLINE 4

typedef struct jscope {
    jgc gc;
    jtrack tr;
    int32_t rc;
    struct jscope *parent;
    size_t n, cap;
    jstr **names;          /* point at the inline arrays until they grow */
    jv *vals;
    jstr *names_in[JSCOPE_INLINE];
    jv vals_in[JSCOPE_INLINE];
} jscope;

typedef struct jloop {
    jgc gc;
    jtrack tr;
    int32_t rc;
    jlist *items;          /* what is iterated (after the loop filter) */
    size_t i;              /* index0 */
    int depth;             /* 1 for the outermost level of a recursive loop */
    bool has_changed;
    jv changed;            /* last arguments of loop.changed() */
    const jnode *node;     /* recursive loops call the body again */
    struct jscope *scope;
} jloop;

enum { JF_BUILTIN, JF_METHOD, JF_MACRO, JF_LOOP };

struct jfunc {
    jgc gc;
    int32_t rc;
    uint8_t kind;
    const jbuiltin *b;     /* JF_BUILTIN / JF_METHOD */
    jv self;               /* JF_METHOD receiver */
    const jnode *macro;    /* JF_MACRO: N_MACRO or N_CALLBLOCK (caller) */
    jscope *scope;         /* JF_MACRO: where it was defined */
    jloop *loop;           /* JF_LOOP */
};

const char *jfunc_type_name(const jfunc *f);
void jfunc_write(jbuf *b, const jfunc *f);

typedef struct jctx {
    const jinja_tpl *t;
    jbuf *out;
    jscope *scope;
    jtrack live;           /* namespaces, scopes, loops still alive */
    jinja_limits lim;
    uint64_t steps;
    uint32_t depth, macro_depth;
    struct tm now;
    sl_err *err;
    int status;            /* 0, -1 or JINJA_UNSUPPORTED once failed */
    jstr *name_loop, *name_varargs, *name_kwargs, *name_caller;   /* immortal */
} jctx;

/* Records the first error (at node N's position) and returns -1. */
int jerr(jctx *c, const jnode *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The same for a feature this interpreter does not implement. */
int jerr_unsupported(jctx *c, const jnode *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Error for using an undefined value U. */
int jerr_undef(jctx *c, const jnode *n, jv u);
/* Counts evaluation work; fails when the step budget is spent. */
int jcharge(jctx *c, const jnode *n, uint64_t steps);

/* Makes a string value, enforcing the size limit. */
int jmake_str(jctx *c, const jnode *n, jbuf *b, jv *out);
int jmake_strn(jctx *c, const jnode *n, const char *s, size_t len, jv *out);
/* New containers, tracked (namespaces) and checked against max_items. */
jlist *jnew_list(jctx *c, const jnode *n, size_t cap);
int jlist_add(jctx *c, const jnode *n, jlist *l, jv v);
jdict *jnew_ns(jctx *c);

/* Iteration: the items of V as a list (a new reference).  Strings yield
 * their characters, dicts their keys, undefined nothing. */
int jiter(jctx *c, const jnode *n, jv v, jlist **out);

/* Sandboxed attribute / item access (Jinja's getattr / getitem). */
int jgetattr(jctx *c, const jnode *n, jv obj, jstr *name, jv *out);
int jgetitem(jctx *c, const jnode *n, jv obj, jv key, jv *out);

/* Calls a callable value with evaluated arguments. */
typedef struct {
    jv *pos;
    size_t npos;
    jstr **kwn;
    jv *kwv;
    size_t nkw;
} jargs;
int jcall(jctx *c, const jnode *n, jv fn, const jargs *a, jv *out);

/* Operators used by filters too. */
int jcompare(jctx *c, const jnode *n, int op, jv a, jv b, bool *res);
int jbinop(jctx *c, const jnode *n, int op, jv a, jv b, jv *out);
/* Python ordering for sort/min/max: -1, 0, 1 (error for mixed types). */
int jorder(jctx *c, const jnode *n, jv a, jv b, bool fold_case, int *res);

/* ---- builtins (jinja_builtins.c) ---------------------------------------- */

/* str(v) as a string value (undefined prints as ""). */
int jto_str(jctx *c, const jnode *n, jv v, jv *out);
/* V as an integer argument (int or bool), else an error naming WHAT. */
int jarg_int(jctx *c, const jnode *n, jv v, const char *what, int64_t *out);
/* Calls str / dict method NAME on SELF (str() of SELF for str methods). */
int jstr_method(jctx *c, const jnode *n, jv self, const char *name, const jv *args, size_t nargs, jv *out);
int jdict_method(jctx *c, const jnode *n, jv self, const char *name, const jv *args, size_t nargs, jv *out);
int jstr_reverse(jctx *c, const jnode *n, const jstr *s, jv *out);
/* Appends CP in upper case (DIR > 0) or lower case (DIR < 0). */
void jcase_put(jbuf *b, uint32_t cp, int dir);
/* Python's \w: letters, digits, underscore. */
bool jis_word_char(uint32_t cp);
/* Python int(v, base) / float(v): 0, -1 when not convertible, -2 when the
 * value cannot be represented. */
int jparse_int(jv v, int base, int64_t *out);
int jparse_float(jv v, double *out);
/* Jinja's attribute getter: "a.b.0" looks up a, then b, then item 0. */
int jattr_path(jctx *c, const jnode *n, jv item, jv attr, jv *out);
/* Stable sort of ITEMS by KEYS (same length), Python's sorted(). */
int jsort(jctx *c, const jnode *n, jlist *items, jlist *keys, bool fold_case, bool reverse);

/* str % args (printf-style formatting). */
int jstr_format_percent(jctx *c, const jnode *n, jv fmt, jv args, jv *out);
/* Lower-cased copy (malloc'd, refcount 1), or NULL when out of memory. */
jstr *jstr_lower(const jstr *s);

/* Bound arguments, in the order of the builtin's parameter list; missing
 * ones are JV_UNDEF.  REST holds extra positional arguments for builtins
 * that take *args. */
typedef struct {
    jv p[8];
    const jv *rest;
    size_t nrest;
    const jargs *raw;
} jbound;

typedef int (*jbuiltin_fn)(jctx *c, const jnode *n, jv self, const jbound *a, jv *out);

struct jbuiltin {
    const char *name;
    jbuiltin_fn fn;
    const char *params;    /* space separated; "*" at the end takes *args */
    uint8_t flags;
};
enum { JB_KWARGS = 1,     /* takes arbitrary keyword arguments (raw->kwn) */
       JB_UNSAFE = 2,     /* a mutating method the immutable sandbox refuses */
       JB_MARKUP = 4 };   /* keeps a Markup operand Markup (markupsafe's wrapped str methods) */

/* HTML escaping as markupsafe.escape does it. */
void jhtml_escape(jbuf *b, const char *s, size_t len);

const jbuiltin *jfind_filter(const char *name, size_t len);
const jbuiltin *jfind_test(const char *name, size_t len);
const jbuiltin *jfind_global(const char *name, size_t len);
/* Method NAME of values like SELF (str, dict, list, loop), or NULL.
 * *KNOWN is set when Python has such a method that sluice lacks. */
const jbuiltin *jfind_method(jv self, const char *name, size_t len, bool *known);

int jbind(jctx *c, const jnode *n, const jbuiltin *b, const jargs *a, jbound *out);
int jcall_builtin(jctx *c, const jnode *n, const jbuiltin *b, jv self, const jargs *a, jv *out);

/* Filters applied by name from map/select (runtime lookup). */
int japply_filter(jctx *c, const jnode *n, const jbuiltin *f, jv v, const jv *args, size_t nargs, jv *out);
int japply_test(jctx *c, const jnode *n, const jbuiltin *t, jv v, const jv *args, size_t nargs, bool *res);

#endif
