/* JSON Schema to GBNF (json_schema.h).  Every schema node becomes one rule
 * named after its place ("root", "root-name", "root-items"), built from
 * shared primitive rules (string, number, value ...) that are written once,
 * when first used. */
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode/json_schema.h"

enum { MAX_DEPTH = 64, NAME_CAP = 96 };

/* The primitive rules, in the order they are written. */
enum {
    P_SPACE, P_BOOLEAN, P_NULL, P_INTEGRAL, P_NUMBER, P_INTEGER, P_CHAR, P_STRING, P_VALUE, P_OBJECT, P_ARRAY,
    P_HEX, P_DATE, P_TIME, P_COUNT
};

static const struct {
    const char *name, *body;
    unsigned deps; /* other primitives it uses */
} PRIM[P_COUNT] = {
    [P_SPACE] = {"space", "( \" \" | \"\\n\" [ \\t]{0,20} )?", 0},
    [P_BOOLEAN] = {"boolean", "( \"true\" | \"false\" ) space", 1u << P_SPACE},
    [P_NULL] = {"null", "\"null\" space", 1u << P_SPACE},
    [P_INTEGRAL] = {"integral-part", "[0] | [1-9] [0-9]{0,15}", 0},
    [P_NUMBER] = {"number", "\"-\"? integral-part ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,16} )? space",
                  1u << P_INTEGRAL | 1u << P_SPACE},
    [P_INTEGER] = {"integer", "\"-\"? integral-part space", 1u << P_INTEGRAL | 1u << P_SPACE},
    [P_CHAR] = {"char", "[^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )", 0},
    [P_STRING] = {"string", "\"\\\"\" char* \"\\\"\" space", 1u << P_CHAR | 1u << P_SPACE},
    [P_VALUE] = {"value", "object | array | string | number | boolean | null",
                 1u << P_OBJECT | 1u << P_ARRAY | 1u << P_STRING | 1u << P_NUMBER | 1u << P_BOOLEAN | 1u << P_NULL},
    [P_OBJECT] = {"object",
                  "\"{\" space ( string \":\" space value ( \",\" space string \":\" space value )* )? \"}\" space",
                  1u << P_STRING | 1u << P_VALUE | 1u << P_SPACE},
    [P_ARRAY] = {"array", "\"[\" space ( value ( \",\" space value )* )? \"]\" space", 1u << P_VALUE | 1u << P_SPACE},
    [P_HEX] = {"hex", "[0-9a-fA-F]", 0},
    [P_DATE] = {"date", "[0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] )", 0},
    [P_TIME] = {"time", "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" ( [0-5] [0-9] | \"60\" ) ( \".\" [0-9]{1,6} )? "
                        "( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )?", 0},
};

typedef struct {
    char *name, *ref;
} ref_rule;

typedef struct {
    char *out;
    size_t n, cap;
    bool oom;
    unsigned prims;   /* written so far */
    char **names;     /* rule names in use */
    size_t n_names, cap_names;
    ref_rule *refs;   /* $ref targets already given a rule */
    size_t n_refs, cap_refs;
    json_t *doc;
    sl_err *err;
} builder;

static void put(builder *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(builder *b, const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int k = vsnprintf(b->out + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->oom = true;
            return;
        }
        if ((size_t)k < b->cap - b->n) {
            b->n += (size_t)k;
            return;
        }
        size_t c = 2 * b->cap + (size_t)k + 256;
        char *o = realloc(b->out, c);
        if (!o) {
            b->oom = true;
            return;
        }
        b->out = o, b->cap = c;
    }
}

static void prim(builder *b, int p)
{
    if (b->prims & 1u << p) return;
    b->prims |= 1u << p;
    for (int d = 0; d < P_COUNT; d++)
        if (PRIM[p].deps & 1u << d) prim(b, d);
    put(b, "%s ::= %s\n", PRIM[p].name, PRIM[p].body);
}

static int fail(builder *b, const char *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(builder *b, const char *at, const char *fmt, ...)
{
    char msg[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return sl_errf(b->err, "json_schema: at %s: %s", *at ? at : "/", msg);
}

/* A fresh rule name from BASE (word characters only, unique). */
static const char *new_name(builder *b, const char *base)
{
    char n[NAME_CAP + 16];
    size_t k = 0;
    for (const char *p = base; *p && k < NAME_CAP; p++) {
        char c = *p;
        bool word = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        n[k++] = word ? c : '-';
    }
    n[k] = 0;
    for (int i = 1;; i++) {
        bool used = false;
        for (size_t j = 0; j < b->n_names && !used; j++) used = !strcmp(b->names[j], n);
        for (int p = 0; p < P_COUNT && !used; p++) used = !strcmp(PRIM[p].name, n);
        if (!used) break;
        snprintf(n + k, 16, "-%d", i);
    }
    if (b->n_names == b->cap_names) {
        size_t c = b->cap_names ? 2 * b->cap_names : 16;
        char **a = realloc(b->names, c * sizeof *a);
        if (!a) return b->oom = true, NULL;
        b->names = a, b->cap_names = c;
    }
    char *s = strdup(n);
    if (!s) return b->oom = true, NULL;
    return b->names[b->n_names++] = s;
}

/* A GBNF string literal matching the bytes of S exactly. */
static void put_literal(builder *b, const char *s)
{
    put(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') put(b, "\\%c", *p);
        else if (*p == '\n') put(b, "\\n");
        else if (*p == '\r') put(b, "\\r");
        else if (*p == '\t') put(b, "\\t");
        else if (*p < 0x20) put(b, "\\x%02X", *p);
        else put(b, "%c", *p);
    }
    put(b, "\"");
}

/* V as compact JSON, as a literal. */
static int put_json_literal(builder *b, const json_t *v)
{
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!s) return b->oom = true, -1;
    put_literal(b, s);
    free(s);
    return 0;
}

static int gen(builder *b, const json_t *sc, const char *name, const char *at, int depth, const char **rule);

/* gen() of a child at AT/KEY, named NAME-SUFFIX. */
static int child(builder *b, const json_t *sc, const char *name, const char *suffix, const char *at, const char *key,
                 int depth, const char **rule)
{
    char n[NAME_CAP + 64], p[1024];
    snprintf(n, sizeof n, "%.*s-%s", NAME_CAP, name, suffix);
    snprintf(p, sizeof p, "%s/%s", at, key);
    return gen(b, sc, n, p, depth + 1, rule);
}

static int gen_ref(builder *b, const char *ref, const char *name, const char *at, int depth, const char **rule)
{
    for (size_t i = 0; i < b->n_refs; i++)
        if (!strcmp(b->refs[i].ref, ref)) return *rule = b->refs[i].name, 0;
    if (ref[0] != '#') return fail(b, at, "$ref '%s' is not local (only \"#/...\" references are)", ref);
    const json_t *t = b->doc;
    char key[256];
    for (const char *p = ref + 1; *p == '/' && t;) {
        size_t k = 0;
        for (p++; *p && *p != '/' && k + 1 < sizeof key; p++) {
            if (p[0] == '~' && (p[1] == '0' || p[1] == '1')) key[k++] = p[1] == '0' ? '~' : '/', p++;
            else key[k++] = *p;
        }
        key[k] = 0;
        t = json_is_array(t) ? json_array_get(t, (size_t)atol(key)) : json_object_get(t, key);
    }
    if (!t) return fail(b, at, "$ref '%s' points to nothing in the schema", ref);
    const char *last = strrchr(ref, '/');
    const char *n = new_name(b, last && last[1] ? last + 1 : name);
    if (!n) return -1;
    if (b->n_refs == b->cap_refs) {
        size_t c = b->cap_refs ? 2 * b->cap_refs : 8;
        ref_rule *r = realloc(b->refs, c * sizeof *r);
        if (!r) return b->oom = true, -1;
        b->refs = r, b->cap_refs = c;
    }
    char *rc = strdup(ref);
    if (!rc) return b->oom = true, -1;
    b->refs[b->n_refs++] = (ref_rule){(char *)n, rc};
    /* the name is known before the body, so a schema may refer to itself */
    const char *body;
    if (gen(b, t, n, ref + 1, depth + 1, &body)) return -1;
    put(b, "%s ::= %s\n", n, body);
    return *rule = n, 0;
}

/* One alternative per element of LIST (anyOf / oneOf). */
static int gen_alts(builder *b, const json_t *list, const char *kw, const char *name, const char *at, int depth,
                    const char *n)
{
    if (!json_is_array(list) || !json_array_size(list)) return fail(b, at, "'%s' must be a non-empty array", kw);
    const char **alt = calloc(json_array_size(list), sizeof *alt);
    if (!alt) return b->oom = true, -1;
    int rc = 0;
    for (size_t i = 0; i < json_array_size(list) && !rc; i++) {
        char suffix[32], key[64];
        snprintf(suffix, sizeof suffix, "%zu", i);
        snprintf(key, sizeof key, "%s/%zu", kw, i);
        rc = child(b, json_array_get(list, i), name, suffix, at, key, depth, &alt[i]);
    }
    if (!rc) {
        put(b, "%s ::= ", n);
        for (size_t i = 0; i < json_array_size(list); i++) put(b, "%s%s", i ? " | " : "", alt[i]);
        put(b, "\n");
    }
    free(alt);
    return rc;
}

static int gen_enum(builder *b, const json_t *list, const char *at, const char *n)
{
    if (!json_is_array(list) || !json_array_size(list)) return fail(b, at, "'enum' must be a non-empty array");
    prim(b, P_SPACE);
    put(b, "%s ::= ( ", n);
    for (size_t i = 0; i < json_array_size(list); i++) {
        if (i) put(b, " | ");
        if (put_json_literal(b, json_array_get(list, i))) return -1;
    }
    put(b, " ) space\n");
    return 0;
}

static int get_count(builder *b, const json_t *sc, const char *kw, const char *at, long dflt, long *out)
{
    const json_t *v = json_object_get(sc, kw);
    *out = dflt;
    if (!v) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 10000)
        return fail(b, at, "'%s' must be an integer in [0, 10000]", kw);
    *out = (long)json_integer_value(v);
    return 0;
}

/* X repeated MIN..MAX times (MAX < 0: unbounded), as a GBNF suffix. */
static void put_count(builder *b, long min, long max)
{
    if (max < 0) put(b, min == 0 ? "*" : min == 1 ? "+" : "{%ld,}", min);
    else if (min == max) put(b, "{%ld}", min);
    else put(b, "{%ld,%ld}", min, max);
}

static int gen_string(builder *b, const json_t *sc, const char *at, const char *n)
{
    if (json_object_get(sc, "pattern")) return fail(b, at, "'pattern' is not supported");
    const char *fmt = json_string_value(json_object_get(sc, "format"));
    prim(b, P_SPACE);
    if (fmt && (!strcmp(fmt, "date") || !strcmp(fmt, "time") || !strcmp(fmt, "date-time"))) {
        bool d = strcmp(fmt, "time") != 0, t = strcmp(fmt, "date") != 0;
        if (d) prim(b, P_DATE);
        if (t) prim(b, P_TIME);
        put(b, "%s ::= \"\\\"\" %s%s%s \"\\\"\" space\n", n, d ? "date" : "", d && t ? " \"T\" " : "", t ? "time" : "");
        return 0;
    }
    if (fmt && !strcmp(fmt, "uuid")) {
        prim(b, P_HEX);
        put(b, "%s ::= \"\\\"\" hex{8} \"-\" hex{4} \"-\" hex{4} \"-\" hex{4} \"-\" hex{12} \"\\\"\" space\n", n);
        return 0;
    }
    long min, max;
    if (get_count(b, sc, "minLength", at, 0, &min) || get_count(b, sc, "maxLength", at, -1, &max)) return -1;
    if (max >= 0 && max < min) return fail(b, at, "maxLength %ld is below minLength %ld", max, min);
    prim(b, P_CHAR);
    put(b, "%s ::= \"\\\"\" char", n);
    put_count(b, min, max);
    put(b, " \"\\\"\" space\n");
    return 0;
}

static int gen_array(builder *b, const json_t *sc, const char *name, const char *at, int depth, const char *n)
{
    prim(b, P_SPACE);
    const json_t *prefix = json_object_get(sc, "prefixItems"), *items = json_object_get(sc, "items");
    if (json_is_array(items)) prefix = items; /* the draft-4 tuple form */
    if (prefix) {
        if (!json_is_array(prefix)) return fail(b, at, "'prefixItems' must be an array");
        size_t k = json_array_size(prefix);
        const char **r = calloc(k ? k : 1, sizeof *r);
        if (!r) return b->oom = true, -1;
        int rc = 0;
        for (size_t i = 0; i < k && !rc; i++) {
            char suffix[32], key[64];
            snprintf(suffix, sizeof suffix, "%zu", i);
            snprintf(key, sizeof key, "prefixItems/%zu", i);
            rc = child(b, json_array_get(prefix, i), name, suffix, at, key, depth, &r[i]);
        }
        if (!rc) {
            put(b, "%s ::= \"[\" space", n);
            for (size_t i = 0; i < k; i++) put(b, "%s %s", i ? " \",\" space" : "", r[i]);
            put(b, " \"]\" space\n");
        }
        free(r);
        return rc;
    }
    long min, max;
    if (get_count(b, sc, "minItems", at, 0, &min) || get_count(b, sc, "maxItems", at, -1, &max)) return -1;
    if (max >= 0 && max < min) return fail(b, at, "maxItems %ld is below minItems %ld", max, min);
    const char *item;
    if (items) {
        if (child(b, items, name, "item", at, "items", depth, &item)) return -1;
    } else prim(b, P_VALUE), item = "value";
    if (max == 0) {
        put(b, "%s ::= \"[\" space \"]\" space\n", n);
        return 0;
    }
    put(b, "%s ::= \"[\" space %s%s ( \",\" space %s )", n, min ? "" : "( ", item, item);
    put_count(b, min ? min - 1 : 0, max < 0 ? -1 : max - 1);
    put(b, "%s \"]\" space\n", min ? "" : " )?");
    return 0;
}

/* Properties in order, the optional ones optional: F<i> is "properties i..
 * with none written yet", N<i> "after one was written" (so commas fall
 * right whichever are left out). */
static int gen_object(builder *b, const json_t *sc, const char *name, const char *at, int depth, const char *n)
{
    const json_t *props = json_object_get(sc, "properties"), *req = json_object_get(sc, "required"),
                 *add = json_object_get(sc, "additionalProperties");
    if (props && !json_is_object(props)) return fail(b, at, "'properties' must be an object");
    if (req && !json_is_array(req)) return fail(b, at, "'required' must be an array");
    if (add && !json_is_boolean(add) && !json_is_object(add))
        return fail(b, at, "'additionalProperties' must be a boolean or a schema");
    prim(b, P_SPACE);
    prim(b, P_STRING);
    const char *extra = NULL; /* the value rule of additional properties, if allowed */
    if (json_is_object(add) && child(b, add, name, "additional", at, "additionalProperties", depth, &extra)) return -1;
    if ((!add && !props) || json_is_true(add)) prim(b, P_VALUE), extra = "value";
    size_t k = json_object_size(props), i = 0;
    const char **val = calloc(k ? k : 1, sizeof *val), **key = calloc(k ? k : 1, sizeof *key);
    bool *need = calloc(k ? k : 1, sizeof *need);
    int rc = val && key && need ? 0 : (b->oom = true, -1);
    const char *pk;
    json_t *pv;
    json_object_foreach((json_t *)props, pk, pv) {
        if (rc) break;
        key[i] = pk;
        for (size_t j = 0; j < json_array_size(req); j++)
            need[i] |= json_is_string(json_array_get(req, j)) && !strcmp(json_string_value(json_array_get(req, j)), pk);
        char p[512];
        snprintf(p, sizeof p, "properties/%s", pk);
        rc = child(b, pv, name, pk, at, p, depth, &val[i]);
        i++;
    }
    if (!rc) {
        /* the tail after the named properties */
        if (extra) {
            put(b, "%s-kv ::= string \":\" space %s\n", n, extra);
            put(b, "%s-f%zu ::= ( %s-kv ( \",\" space %s-kv )* )?\n", n, k, n, n);
            put(b, "%s-n%zu ::= ( \",\" space %s-kv )*\n", n, k, n);
        } else {
            put(b, "%s-f%zu ::= \"\"\n%s-n%zu ::= \"\"\n", n, k, n, k);
        }
        for (size_t j = k; j-- > 0;) {
            json_t *ks = json_string(key[j]);
            if (!ks) rc = -1, b->oom = true;
            if (rc) break;
            put(b, "%s-kv%zu ::= ", n, j);
            put_json_literal(b, ks);
            json_decref(ks);
            put(b, " space \":\" space %s\n", val[j]);
            if (need[j]) {
                put(b, "%s-f%zu ::= %s-kv%zu %s-n%zu\n", n, j, n, j, n, j + 1);
                put(b, "%s-n%zu ::= \",\" space %s-kv%zu %s-n%zu\n", n, j, n, j, n, j + 1);
            } else {
                put(b, "%s-f%zu ::= %s-kv%zu %s-n%zu | %s-f%zu\n", n, j, n, j, n, j + 1, n, j + 1);
                put(b, "%s-n%zu ::= ( \",\" space %s-kv%zu )? %s-n%zu\n", n, j, n, j, n, j + 1);
            }
        }
        put(b, "%s ::= \"{\" space %s-f0 \"}\" space\n", n, n);
    }
    free(val), free(key), free(need);
    return rc;
}

/* SC under type T (one of the type names). */
static int gen_typed(builder *b, const json_t *sc, const char *t, const char *name, const char *at, int depth,
                     const char *n)
{
    static const struct {
        const char *type;
        int prim;
    } SIMPLE[] = {{"boolean", P_BOOLEAN}, {"null", P_NULL}, {"number", P_NUMBER}, {"integer", P_INTEGER}};
    for (size_t i = 0; i < sizeof SIMPLE / sizeof SIMPLE[0]; i++)
        if (!strcmp(t, SIMPLE[i].type)) {
            prim(b, SIMPLE[i].prim);
            put(b, "%s ::= %s\n", n, PRIM[SIMPLE[i].prim].name);
            return 0;
        }
    if (!strcmp(t, "string")) return gen_string(b, sc, at, n);
    if (!strcmp(t, "array")) return gen_array(b, sc, name, at, depth, n);
    if (!strcmp(t, "object")) return gen_object(b, sc, name, at, depth, n);
    return fail(b, at, "unknown type '%s'", t);
}

static int gen_types(builder *b, const json_t *sc, const json_t *type, const char *name, const char *at, int depth,
                     const char *n)
{
    if (json_is_string(type)) return gen_typed(b, sc, json_string_value(type), name, at, depth, n);
    if (!json_is_array(type) || !json_array_size(type))
        return fail(b, at, "'type' must be a type name or a non-empty array of them");
    size_t k = json_array_size(type);
    char (*alt)[NAME_CAP + 64] = calloc(k, sizeof *alt);
    if (!alt) return b->oom = true, -1;
    int rc = 0;
    for (size_t i = 0; i < k && !rc; i++) {
        const char *t = json_string_value(json_array_get(type, i));
        if (!t) rc = fail(b, at, "'type' list holds a non-string");
        const char *an = rc ? NULL : new_name(b, n);
        if (!rc && !an) rc = -1;
        if (!rc) snprintf(alt[i], sizeof alt[i], "%s", an), rc = gen_typed(b, sc, t, an, at, depth, an);
    }
    if (!rc) {
        put(b, "%s ::= ", n);
        for (size_t i = 0; i < k; i++) put(b, "%s%s", i ? " | " : "", alt[i]);
        put(b, "\n");
    }
    free(alt);
    return rc;
}

/* The rule for schema SC at AT (a JSON pointer) into *RULE. */
static int gen(builder *b, const json_t *sc, const char *name, const char *at, int depth, const char **rule)
{
    if (depth > MAX_DEPTH) return fail(b, at, "nested more than %d deep", MAX_DEPTH);
    if (b->oom) return sl_errf(b->err, "json_schema: out of memory");
    if (json_is_true(sc) || (json_is_object(sc) && !json_object_size(sc))) return prim(b, P_VALUE), *rule = "value", 0;
    if (!json_is_object(sc)) return fail(b, at, "a schema must be an object or true");
    const json_t *ref = json_object_get(sc, "$ref");
    if (ref) {
        if (!json_is_string(ref)) return fail(b, at, "'$ref' must be a string");
        return gen_ref(b, json_string_value(ref), name, at, depth, rule);
    }
    const json_t *all = json_object_get(sc, "allOf");
    if (all) {
        if (!json_is_array(all) || json_array_size(all) != 1) return fail(b, at, "'allOf' is supported with one schema only");
        return child(b, json_array_get(all, 0), name, "all", at, "allOf/0", depth, rule);
    }
    const char *n = new_name(b, name);
    if (!n) return sl_errf(b->err, "json_schema: out of memory");
    *rule = n;
    const json_t *v, *type = json_object_get(sc, "type");
    int rc;
    if ((v = json_object_get(sc, "const"))) {
        prim(b, P_SPACE);
        put(b, "%s ::= ", n);
        rc = put_json_literal(b, v);
        put(b, " space\n");
    } else if ((v = json_object_get(sc, "enum"))) rc = gen_enum(b, v, at, n);
    else if ((v = json_object_get(sc, "anyOf"))) rc = gen_alts(b, v, "anyOf", name, at, depth, n);
    else if ((v = json_object_get(sc, "oneOf"))) rc = gen_alts(b, v, "oneOf", name, at, depth, n);
    else if (type) rc = gen_types(b, sc, type, name, at, depth, n);
    else if (json_object_get(sc, "properties") || json_object_get(sc, "additionalProperties"))
        rc = gen_object(b, sc, name, at, depth, n);
    else if (json_object_get(sc, "items") || json_object_get(sc, "prefixItems")) rc = gen_array(b, sc, name, at, depth, n);
    else {
        prim(b, P_VALUE);
        put(b, "%s ::= value\n", n);
        rc = 0;
    }
    if (!rc && b->oom) rc = sl_errf(b->err, "json_schema: out of memory");
    return rc;
}

int json_schema_to_gbnf(const char *schema, size_t len, char **gbnf, sl_err *err)
{
    return json_schema_to_gbnf_as(schema, len, "root", gbnf, err);
}

int json_schema_to_gbnf_as(const char *schema, size_t len, const char *top, char **gbnf, sl_err *err)
{
    *gbnf = NULL;
    json_error_t je;
    json_t *doc = json_loadb(schema, len, JSON_DECODE_ANY, &je);
    if (!doc) return sl_errf(err, "json_schema: not JSON: %s (line %d, column %d)", je.text, je.line, je.column);
    builder b = {.doc = doc, .err = err};
    const char *root;
    int rc = gen(&b, doc, top, "", 0, &root);
    if (!rc && strcmp(root, top)) put(&b, "%s ::= %s\n", top, root);
    if (!rc && b.oom) rc = sl_errf(err, "json_schema: out of memory");
    for (size_t i = 0; i < b.n_names; i++) free(b.names[i]);
    for (size_t i = 0; i < b.n_refs; i++) free(b.refs[i].ref);
    free(b.names);
    free(b.refs);
    json_decref(doc);
    if (rc) {
        free(b.out);
        return -1;
    }
    *gbnf = b.out;
    return 0;
}
