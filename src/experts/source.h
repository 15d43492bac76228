/* An expert source: where the bytes of each routed expert live on disk and
 * where they sit inside a cache slot once read.  The store owns slots,
 * caching and I/O; a source only plans reads and interprets slot memory.
 * Sources: the GGUF itself (source_gguf.c; 4 KiB-aligned ranges around
 * each tensor slice) and multi-drive packs of fixed records
 * (source_pack_create in pack.h). */
#ifndef SLUICE_SOURCE_H
#define SLUICE_SOURCE_H

#include <stdint.h>

#include "experts/io.h"
#include "experts/layout.h"
#include "experts/provider.h"

enum { SOURCE_MAX_READS = 512 };

/* The reads that load one expert; `file` indexes the source's files. */
typedef struct {
    int n;
    io_req req[SOURCE_MAX_READS];
    uint32_t file[SOURCE_MAX_READS];
    uint64_t expect; /* bytes the reads must return in total */
} read_plan;

typedef struct expert_source expert_source;

typedef struct {
    /* Bytes a cache slot needs for the largest expert. */
    uint64_t (*slot_bytes)(const expert_source *s);
    /* Plans reads of expert (layer, e) into slot memory BASE, chunks of at
     * most CHUNK bytes.  Tags are left for the store to set. */
    int (*plan)(expert_source *s, int layer, int expert, uint8_t *base, uint32_t chunk, read_plan *p, sl_err *err);
    /* Views of expert (layer, e) loaded at BASE. */
    void (*view)(const expert_source *s, int layer, int expert, const uint8_t *base, expert_view *v);
    /* Optional: checks a loaded expert (e.g. checksums); -1 with err set. */
    int (*check)(expert_source *s, int layer, int expert, const uint8_t *base, sl_err *err);
    /* Path, fd and size at open time of file F, for messages and checks. */
    const char *(*file_path)(const expert_source *s, uint32_t f);
    int (*file_fd)(const expert_source *s, uint32_t f);
    uint64_t (*file_size)(const expert_source *s, uint32_t f);
    void (*destroy)(expert_source *s);
    /* Optional: a read of file F at offset OFF completed with RES (bytes,
     * or -errno), when reads of F had been at the device for BUSY_S
     * seconds in all (io_done.busy_s; -1 if unknown), e.g. for a source
     * that measures its drives. */
    void (*on_complete)(expert_source *s, uint32_t f, uint64_t off, int64_t res, double busy_s);
    /* Optional: a planned read of LEN bytes of file F was dropped before
     * it reached the device (a guess the router did not choose). */
    void (*on_drop)(expert_source *s, uint32_t f, uint32_t len);
    /* Optional: loading (layer, expert) failed with CODE (-errno of a read
     * of file F, or -EBADMSG when check refused the bytes).  Plans the
     * whole expert again, e.g. from another copy, and returns 1; returns 0
     * when there is nothing else to try, -1 on error.  ATTEMPT counts the
     * re-plans of this load from 1. */
    int (*replan)(expert_source *s, int layer, int expert, uint8_t *base, uint32_t chunk, int32_t code, uint32_t f,
                  int attempt, read_plan *p, sl_err *err);
} expert_source_ops;

struct expert_source {
    const expert_source_ops *ops;
    const expert_layout *L;
    int direct; /* 1 if reads bypass the page cache */
    int n_files; /* files (GGUF parts, pack drives) file_fd and file_path index */
};

/* Reads from the GGUF (or split GGUF) described by L, with O_DIRECT where
 * the filesystem allows it. */
int source_gguf_create(expert_source **out, const expert_layout *L, sl_err *err);
uint64_t source_gguf_slot_bytes(const expert_layout *L);

#endif
