/* JSON both ways: values from jansson (messages, tools, extra variables) and
 * tojson output exactly as Python's json.dumps writes it. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja_int.h"

#define MAX_JSON_DEPTH 256

static int from_object(jv *out, const json_t *j, int depth, sl_err *err)
{
    jdict *d = jdict_new();
    if (!d) return sl_errf(err, "out of memory");
    *out = (jv){.k = JV_DICT, .d = d};
    const char *key;
    json_t *val;
    /* jansson iterates objects in insertion order, like Python dicts */
    json_object_foreach((json_t *)j, key, val) {
        jv k = jv_cstr(key), v;
        if (k.k != JV_STR) return sl_errf(err, "out of memory");
        if (jv_from_json(&v, val, depth + 1, err)) {
            jv_drop(k);
            return -1;
        }
        if (jdict_set(d, k, v)) return sl_errf(err, "out of memory");
    }
    return 0;
}

int jv_from_json(jv *out, const json_t *j, int depth, sl_err *err)
{
    *out = jv_none();
    if (depth > MAX_JSON_DEPTH) return sl_errf(err, "JSON nested deeper than %d levels", MAX_JSON_DEPTH);
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        int rc = from_object(out, j, depth, err);
        if (rc) {
            jv_drop(*out);
            *out = jv_none();
        }
        return rc;
    }
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        jlist *l = jlist_new(n);
        if (!l) return sl_errf(err, "out of memory");
        *out = (jv){.k = JV_LIST, .l = l};
        for (size_t i = 0; i < n; i++) {
            jv v;
            int rc = jv_from_json(&v, json_array_get(j, i), depth + 1, err);
            if (!rc && jlist_push(l, v)) rc = sl_errf(err, "out of memory");
            if (rc) {
                jv_drop(*out);
                *out = jv_none();
                return -1;
            }
        }
        return 0;
    }
    case JSON_STRING:
        *out = jv_str(json_string_value(j), json_string_length(j));
        return out->k == JV_STR ? 0 : sl_errf(err, "out of memory");
    case JSON_INTEGER: *out = jv_int((int64_t)json_integer_value(j)); return 0;
    case JSON_REAL: *out = jv_float(json_real_value(j)); return 0;
    case JSON_TRUE: *out = jv_bool(true); return 0;
    case JSON_FALSE: *out = jv_bool(false); return 0;
    default: return 0;
    }
}

/* ---- json.dumps ---------------------------------------------------------- */

static void jstr_json(jbuf *b, const char *s, size_t len, bool ensure_ascii)
{
    jbuf_putc(b, '"');
    size_t run = 0;
    for (size_t i = 0; i < len;) {
        unsigned char ch = (unsigned char)s[i];
        if (ch >= 0x20 && ch != '"' && ch != '\\' && (ch < 0x80 || !ensure_ascii)) {
            i++;
            run++;
            continue;
        }
        jbuf_put(b, s + i - run, run);
        run = 0;
        static const char esc_in[] = "\"\\\n\r\t\b\f", esc_out[] = "\"\\nrtbf";
        const char *e = ch ? strchr(esc_in, ch) : NULL;
        uint32_t cp = ch;
        size_t n = 1;
        if (ch >= 0x80) n = ju_decode(s + i, len - i, &cp);
        if (e) {
            jbuf_putc(b, '\\');
            jbuf_putc(b, esc_out[e - esc_in]);
        } else if (cp >= 0x10000) {
            cp -= 0x10000;
            jbuf_printf(b, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
        } else {
            jbuf_printf(b, "\\u%04x", cp);
        }
        i += n;
    }
    jbuf_put(b, s + len - run, run);
    jbuf_putc(b, '"');
}

static void newline_indent(jbuf *b, const jjson_opts *o, int level)
{
    jbuf_putc(b, '\n');
    for (int i = 0; i < level; i++) jbuf_put(b, o->indent, strlen(o->indent));
}

static const char *item_sep(const jjson_opts *o) { return o->item_sep ? o->item_sep : o->indent ? "," : ", "; }
static const char *key_sep(const jjson_opts *o) { return o->key_sep ? o->key_sep : ": "; }

static int json_fail(char *errbuf, size_t errcap, jv v)
{
    snprintf(errbuf, errcap, "Object of type %s is not JSON serializable", jv_type_name(v));
    return -1;
}

/* A dict key as json.dumps turns it into a string. */
static int json_key(jbuf *b, jv k, const jjson_opts *o, char *errbuf, size_t errcap)
{
    jbuf tmp = {.max = SIZE_MAX};
    switch (k.k) {
    case JV_STR: jstr_json(b, k.s->s, k.s->len, o->ensure_ascii); return 0;
    case JV_BOOL: jbuf_put(b, k.b ? "\"true\"" : "\"false\"", k.b ? 6 : 7); return 0;
    case JV_NONE: jbuf_put(b, "\"null\"", 6); return 0;
    case JV_INT: jbuf_printf(b, "\"%lld\"", (long long)k.i); return 0;
    case JV_FLOAT:
        jv_write_float(&tmp, k.f);
        if (tmp.p && !strcmp(tmp.p, "nan")) jbuf_put(b, "\"NaN\"", 5);
        else if (tmp.p && !strcmp(tmp.p, "inf")) jbuf_put(b, "\"Infinity\"", 10);
        else if (tmp.p && !strcmp(tmp.p, "-inf")) jbuf_put(b, "\"-Infinity\"", 11);
        else {
            jbuf_putc(b, '"');
            jbuf_put(b, tmp.p, tmp.n);
            jbuf_putc(b, '"');
        }
        jbuf_free(&tmp);
        return 0;
    default:
        snprintf(errbuf, errcap, "keys must be str, int, float, bool or None, not %s", jv_type_name(k));
        return -1;
    }
}

/* Key order for sort_keys: Python sorts the original keys (all of one type). */
static int key_cmp(const void *pa, const void *pb)
{
    const jv *a = *(const jv *const *)pa, *b = *(const jv *const *)pb;
    if (a->k == JV_STR && b->k == JV_STR) {
        size_t m = a->s->len < b->s->len ? a->s->len : b->s->len;
        int r = memcmp(a->s->s, b->s->s, m);
        return r ? r : (a->s->len > b->s->len) - (a->s->len < b->s->len);
    }
    double x = a->k == JV_FLOAT ? a->f : a->k == JV_INT ? (double)a->i : a->k == JV_BOOL ? a->b : 0;
    double y = b->k == JV_FLOAT ? b->f : b->k == JV_INT ? (double)b->i : b->k == JV_BOOL ? b->b : 0;
    return (x > y) - (x < y);
}

static int json_dict(jbuf *b, const jdict *d, const jjson_opts *o, int depth, char *errbuf, size_t errcap)
{
    if (!d->n) {
        jbuf_put(b, "{}", 2);
        return 0;
    }
    const jv **order = malloc(d->n * sizeof *order);
    if (!order) {
        snprintf(errbuf, errcap, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < d->n; i++) order[i] = &d->k[i];
    if (o->sort_keys) {
        for (size_t i = 1; i < d->n; i++) {
            bool num_a = order[0]->k != JV_STR, num_b = order[i]->k != JV_STR;
            if (num_a != num_b || order[i]->k == JV_NONE) {
                snprintf(errbuf, errcap, "'<' not supported between instances of '%s' and '%s'",
                         jv_type_name(*order[i]), jv_type_name(*order[0]));
                free(order);
                return -1;
            }
        }
        qsort(order, d->n, sizeof *order, key_cmp);
    }
    jbuf_putc(b, '{');
    int rc = 0;
    for (size_t i = 0; i < d->n && !rc; i++) {
        if (i) jbuf_put(b, item_sep(o), strlen(item_sep(o)));
        if (o->indent) newline_indent(b, o, depth + 1);
        rc = json_key(b, *order[i], o, errbuf, errcap);
        jbuf_put(b, key_sep(o), strlen(key_sep(o)));
        if (!rc) rc = jv_write_json(b, d->v[order[i] - d->k], o, depth + 1, errbuf, errcap);
    }
    free(order);
    if (o->indent) newline_indent(b, o, depth);
    jbuf_putc(b, '}');
    return rc;
}

static int json_list(jbuf *b, const jlist *l, const jjson_opts *o, int depth, char *errbuf, size_t errcap)
{
    if (!l->n) {
        jbuf_put(b, "[]", 2);
        return 0;
    }
    jbuf_putc(b, '[');
    for (size_t i = 0; i < l->n; i++) {
        if (i) jbuf_put(b, item_sep(o), strlen(item_sep(o)));
        if (o->indent) newline_indent(b, o, depth + 1);
        if (jv_write_json(b, l->v[i], o, depth + 1, errbuf, errcap)) return -1;
    }
    if (o->indent) newline_indent(b, o, depth);
    jbuf_putc(b, ']');
    return 0;
}

int jv_write_json(jbuf *b, jv v, const jjson_opts *o, int depth, char *errbuf, size_t errcap)
{
    if (depth > MAX_JSON_DEPTH) {
        snprintf(errbuf, errcap, "value nested deeper than %d levels", MAX_JSON_DEPTH);
        return -1;
    }
    if (b->over) return 0;
    switch (v.k) {
    case JV_NONE: jbuf_put(b, "null", 4); return 0;
    case JV_BOOL: jbuf_put(b, v.b ? "true" : "false", v.b ? 4 : 5); return 0;
    case JV_INT: jbuf_printf(b, "%lld", (long long)v.i); return 0;
    case JV_FLOAT:
        if (v.f != v.f) jbuf_put(b, "NaN", 3);
        else if (v.f > 1.7976931348623157e308) jbuf_put(b, "Infinity", 8);
        else if (v.f < -1.7976931348623157e308) jbuf_put(b, "-Infinity", 9);
        else jv_write_float(b, v.f);
        return 0;
    case JV_STR: jstr_json(b, v.s->s, v.s->len, o->ensure_ascii); return 0;
    case JV_LIST:
        if (v.l->gen) break;
        return json_list(b, v.l, o, depth, errbuf, errcap);
    case JV_DICT:
        if (v.d->ns) break;
        return json_dict(b, v.d, o, depth, errbuf, errcap);
    default:
        break;
    }
    return json_fail(errbuf, errcap, v);
}
