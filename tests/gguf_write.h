/* Test helper: writes a copy of an open GGUF file with one edit (a key
 * dropped or a string replaced, a tensor dropped, reshaped or retyped), so
 * error tests can damage a valid model in a temp dir.  GGUF v3 layout:
 * header, key/values, tensor infos, padding to the alignment, tensor data
 * (each tensor aligned).  Written from the format description, not copied. */
#ifndef SLUICE_TEST_GGUF_WRITE_H
#define SLUICE_TEST_GGUF_WRITE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"

typedef struct {
    const char *drop_key;
    const char *str_key, *str_val; /* replace the value of a string key */
    const char *drop_tensor;
    const char *edit_tensor;       /* reshape and/or retype this tensor */
    int64_t ne[4];                 /* new shape (all four, trailing 1s) when ne[0] > 0 */
    int new_type;                  /* new ggml type when >= 0 */
} gguf_edit;

static int gw_bytes(FILE *f, const void *p, size_t n) { return fwrite(p, 1, n, f) == n ? 0 : -1; }
static int gw_u32(FILE *f, uint32_t v) { return gw_bytes(f, &v, 4); }
static int gw_u64(FILE *f, uint64_t v) { return gw_bytes(f, &v, 8); }
static int gw_str(FILE *f, const char *s, uint64_t n) { return gw_u64(f, n) || gw_bytes(f, s, (size_t)n); }

static int gw_value(FILE *f, const gguf_value *v);

static int gw_array(FILE *f, const gguf_value *v)
{
    if (gw_u32(f, v->arr.type) || gw_u64(f, v->arr.n)) return -1;
    if (v->arr.type == GGUF_STRING) {
        const gguf_str *s = v->arr.data;
        for (uint64_t i = 0; i < v->arr.n; i++)
            if (gw_str(f, s[i].s, s[i].len)) return -1;
        return 0;
    }
    if (v->arr.type == GGUF_ARRAY) {
        const gguf_value *e = v->arr.data;
        for (uint64_t i = 0; i < v->arr.n; i++)
            if (gw_array(f, &e[i])) return -1;
        return 0;
    }
    return gw_bytes(f, v->arr.data, (size_t)(v->arr.n * gguf_scalar_size(v->arr.type)));
}

static int gw_value(FILE *f, const gguf_value *v)
{
    switch (v->type) {
    case GGUF_STRING: return gw_str(f, v->str.s, v->str.len);
    case GGUF_ARRAY: return gw_array(f, v);
    case GGUF_FLOAT32: {
        float x = (float)v->f;
        return gw_bytes(f, &x, 4);
    }
    case GGUF_FLOAT64: return gw_bytes(f, &v->f, 8);
    default: return gw_bytes(f, &v->u, gguf_scalar_size(v->type)); /* little-endian low bytes */
    }
}

static uint64_t gw_align(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

static int gw_pad(FILE *f, uint64_t pos, uint64_t a)
{
    static const char zero[64];
    uint64_t n = gw_align(pos, a) - pos;
    return n ? gw_bytes(f, zero, (size_t)n) : 0;
}

/* Shape and type of tensor i after the edit; 0 if it is dropped. */
static int gw_tensor(const gguf_file *g, const gguf_edit *e, uint64_t i, int64_t ne[4], uint32_t *type, uint64_t *nbytes)
{
    const gguf_tensor *t = &g->tensors[i];
    if (e->drop_tensor && !strcmp(t->name, e->drop_tensor)) return 0;
    memcpy(ne, t->ne, sizeof t->ne);
    *type = t->type;
    if (e->edit_tensor && !strcmp(t->name, e->edit_tensor)) {
        if (e->ne[0] > 0) memcpy(ne, e->ne, sizeof e->ne);
        if (e->new_type >= 0) *type = (uint32_t)e->new_type;
    }
    *nbytes = ggml_row_bytes(*type, (uint64_t)ne[0]) * (uint64_t)(ne[1] * ne[2] * ne[3]);
    return 1;
}

static int gw_header(FILE *f, const gguf_file *g, const gguf_edit *e, uint64_t align)
{
    uint64_t n_kv = 0, n_t = 0;
    int64_t ne[4];
    uint32_t type;
    uint64_t nb;
    for (uint64_t i = 0; i < g->n_kv; i++) n_kv += !(e->drop_key && !strcmp(g->kv[i].key, e->drop_key));
    for (uint64_t i = 0; i < g->n_tensors; i++) n_t += (uint64_t)gw_tensor(g, e, i, ne, &type, &nb);
    if (gw_bytes(f, "GGUF", 4) || gw_u32(f, 3) || gw_u64(f, n_t) || gw_u64(f, n_kv)) return -1;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const gguf_kv *kv = &g->kv[i];
        if (e->drop_key && !strcmp(kv->key, e->drop_key)) continue;
        gguf_value v = kv->v;
        if (e->str_key && !strcmp(kv->key, e->str_key)) v.str = (gguf_str){(char *)e->str_val, strlen(e->str_val)};
        if (gw_str(f, kv->key, strlen(kv->key)) || gw_u32(f, v.type) || gw_value(f, &v)) return -1;
    }
    uint64_t off = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        if (!gw_tensor(g, e, i, ne, &type, &nb)) continue;
        const gguf_tensor *t = &g->tensors[i];
        if (gw_str(f, t->name, strlen(t->name)) || gw_u32(f, t->n_dims)) return -1;
        for (uint32_t d = 0; d < t->n_dims; d++)
            if (gw_u64(f, (uint64_t)ne[d])) return -1;
        if (gw_u32(f, type) || gw_u64(f, off)) return -1;
        off = gw_align(off + nb, align);
    }
    return 0;
}

/* Writes G with edit E to PATH; returns 0 or -1 (message in MSG). */
static int gguf_write_edited(const gguf_file *g, const char *path, const gguf_edit *e, char *msg, size_t cap)
{
    uint64_t align = g->alignment ? g->alignment : 32;
    FILE *f = fopen(path, "wb");
    if (!f) return snprintf(msg, cap, "cannot create %s", path), -1;
    int rc = gw_header(f, g, e, align);
    long pos = ftell(f);
    if (rc == 0) rc = pos < 0 ? -1 : gw_pad(f, (uint64_t)pos, align);
    for (uint64_t i = 0; rc == 0 && i < g->n_tensors; i++) {
        int64_t ne[4];
        uint32_t type;
        uint64_t nb;
        if (!gw_tensor(g, e, i, ne, &type, &nb)) continue;
        const gguf_tensor *t = &g->tensors[i];
        unsigned char *buf = calloc(1, (size_t)(nb ? nb : 1));
        sl_err err;
        uint64_t n = nb < t->nbytes ? nb : t->nbytes;
        rc = !buf || gguf_read_tensor(g, t, 0, buf, n, &err) || gw_bytes(f, buf, (size_t)nb) ||
             gw_pad(f, nb, align);
        free(buf);
    }
    if (fclose(f) != 0) rc = -1;
    if (rc) snprintf(msg, cap, "writing %s failed", path);
    return rc ? -1 : 0;
}

#endif
