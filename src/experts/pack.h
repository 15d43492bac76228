/* Multi-drive expert packs.
 *
 * A pack copies a model's routed experts out of the GGUF into one container
 * file per drive, so that reads of one expert can be spread over several
 * SSDs (FIELD.md: deltafin's decode scaled 0.55 -> 0.96 tok/s from one to
 * four drives).  Each expert becomes one fixed-size, 4 KiB-aligned record
 * (its parts -- gate, up, down, biases -- back to back), read with a few
 * large O_DIRECT requests.  A manifest file says which drive(s) hold which
 * expert, at which offset, with an xxh3 checksum per record and the
 * identity of the model it was made from.  Hot experts may be held on two
 * drives, and the reader then assembles them from both at once.  The spine
 * stays in the GGUF.  Byte-level formats: docs/PACK.md.
 *
 * This module writes packs and reads manifests; source_pack.c reads
 * experts from a pack through the expert store. */
#ifndef SLUICE_PACK_H
#define SLUICE_PACK_H

#include <stdint.h>

#include "experts/layout.h"
#include "experts/source.h"
#include "gguf/gguf.h"

enum {
    PACK_VERSION = 1,
    PACK_MAX_COPIES = 2,        /* a record lives on at most this many drives */
    PACK_MAX_DRIVES = 64,       /* < 256: the store tags reads with an 8-bit file index */
    PACK_ALIGN = 4096,          /* record and header alignment (O_DIRECT) */
    PACK_PART_ALIGN = 64,       /* alignment of each part inside a record */
    PACK_HEADER_BYTES = 128,    /* manifest header */
    PACK_DRIVE_HEADER_BYTES = 4096,
    PACK_RECORD_ENTRY_BYTES = 48,
    PACK_PART_ENTRY_BYTES = 40,
};

typedef struct {
    uint32_t drive;
    uint64_t off;               /* absolute offset of the record in the drive file */
} pack_copy;

typedef struct {
    uint32_t layer, expert;
    uint64_t xxh3;              /* XXH3-64 of the record's first used_bytes bytes */
    uint32_t n_copies;
    pack_copy copy[PACK_MAX_COPIES];
} pack_record;

/* One tensor slice of an expert: where it is in the GGUF and in the record. */
typedef struct {
    uint32_t gguf_file;         /* split part index */
    uint32_t kind;              /* index into EXPERT_PART_NAMES, or 0xffffffff */
    uint64_t gguf_off, stride, bytes;
    uint64_t rec_off;           /* offset inside the record (multiple of 64) */
} pack_part;

typedef struct {
    uint32_t n_parts;           /* 0 for dense layers */
    uint64_t used_bytes;        /* bytes of a record that hold data (multiple of 64) */
    pack_part part[EXPERT_MAX_PARTS];
} pack_layer;

typedef struct {
    char *path;                 /* drive file, as written (absolute) */
    uint64_t file_bytes;
    uint32_t n_records;
} pack_drive;

typedef struct {
    uint8_t pack_id[16];        /* random per pack; also in every drive file */
    uint8_t model_id[16];       /* pack_model_id() of the source model */
    uint32_t n_layers, n_expert, n_drives, n_records;
    uint64_t record_bytes;      /* record stride in drive files (multiple of 4096) */
    uint64_t data_offset;       /* offset of a drive file's first record */
    pack_drive *drive;          /* [n_drives] */
    pack_layer *layer;          /* [n_layers] */
    pack_record *rec;           /* [n_records], ordered by (layer, expert) */
    int32_t *rec_of;            /* [n_layers * n_expert]: index into rec, or -1 */
} pack_manifest;

/* Reads and validates a manifest (every count, offset and size is checked
 * before use; a damaged or foreign file is an error naming the field). */
int pack_manifest_read(pack_manifest *m, const char *path, sl_err *err);
void pack_manifest_free(pack_manifest *m);

/* Bytes read for one expert of LAYER: used_bytes rounded up to 4 KiB. */
uint64_t pack_read_bytes(const pack_manifest *m, int layer);

/* The drive file header (first 4096 bytes of every drive file). */
typedef struct {
    uint8_t pack_id[16], model_id[16];
    uint32_t drive, n_drives, n_records;
    uint64_t record_bytes, data_offset, file_bytes;
} pack_drive_header;

/* Reads and checks drive file FD's header against the manifest's drive D. */
int pack_drive_header_check(const pack_manifest *m, uint32_t d, int fd, sl_err *err);

/* Identity of a model: XXH3-128 over each GGUF part's size and header
 * (metadata and tensor table) and 16 sampled 4 KiB blocks of its data, so
 * a pack is refused for another model, another quantisation, or the same
 * shapes with other weights (a fine-tune). */
int pack_model_id(const gguf_file *g, uint8_t id[16], sl_err *err);

typedef struct {
    const char *const *drives;  /* directories, one container file each */
    int n_drives;
    double replicate_hot;       /* fraction of experts held on a second drive */
    const double *heat;         /* [n_layers * n_expert] use counts, or NULL */
    int buffered;               /* 1: no O_DIRECT for writes */
    void (*progress)(void *ctx, uint64_t done, uint64_t total);
    void *progress_ctx;
} pack_options;

typedef struct {
    uint64_t records;           /* experts packed */
    uint64_t replicated;        /* of which held on two drives */
    uint64_t record_bytes;
    uint64_t drive_bytes[PACK_MAX_DRIVES];
    uint32_t drive_records[PACK_MAX_DRIVES];
    uint64_t bytes_written;
    int direct;                 /* 1 if every drive file was written with O_DIRECT */
} pack_summary;

/* Writes the routed experts of layout L (made from G) into one file per
 * drive directory and the manifest OUT (temp file + rename, after every
 * drive file is complete and fsynced). */
int pack_write(const gguf_file *g, const expert_layout *L, const char *out, const pack_options *o,
               pack_summary *sum, sl_err *err);

/* Drive file path for drive D of pack OUT inside directory DIR. */
int pack_drive_path(char *buf, size_t cap, const char *dir, const char *out, int d);

/* ---- checking a whole pack ---- */

typedef struct {
    void (*progress)(void *ctx, uint64_t done, uint64_t total); /* in record copies */
    void *progress_ctx;
} pack_check_opts;

typedef struct {
    uint64_t records, total_copies;
    uint64_t copies;            /* record copies checked */
    uint64_t bad;               /* copies unreadable or with a wrong checksum */
    uint64_t lost;              /* records without a single good copy */
    uint64_t bytes;             /* bytes verified good */
    char first_bad[2048];       /* the first bad copy: drive, file, expert, offset, why */
} pack_check_result;

/* Reads every copy of every record of the pack MANIFEST and checks its
 * xxh3 (and, when G is given, that the pack was made from G).  Returns 0
 * when the check ran (R says what it found), -1 when it could not. */
int pack_check(const char *manifest, const gguf_file *g, const pack_check_opts *o, pack_check_result *r, sl_err *err);

/* ---- reading experts from a pack ---- */

typedef struct {
    int verify;                 /* check every record's xxh3 after reading it */
} pack_source_opts;

/* An expert source reading from the pack whose manifest is PACK_PATH, for
 * the model L was built from (refused if the pack is another model's).
 * Drive files that are missing are tolerated when every expert they hold
 * has a copy on another drive. */
int source_pack_create(expert_source **out, const expert_layout *L, const char *pack_path,
                       const pack_source_opts *opts, sl_err *err);

typedef struct {
    uint64_t bytes[PACK_MAX_DRIVES];   /* bytes read per drive */
    uint64_t reads[PACK_MAX_DRIVES];   /* chunks per drive */
    double rate[PACK_MAX_DRIVES];      /* measured bytes/s (0 until measured) */
    uint32_t errors[PACK_MAX_DRIVES];  /* failed reads and checksum mismatches */
    int missing[PACK_MAX_DRIVES];      /* 1 if the drive file was absent at open */
    int n_drives;
    uint64_t verified;                 /* records whose checksum was checked */
    uint64_t verify_bytes;
    double verify_s;                   /* time spent hashing */
    uint64_t fallbacks;                /* expert reads re-planned on another copy */
    double busy_s[PACK_MAX_DRIVES];    /* time the drive had reads in flight */
    uint64_t flexible_bytes[PACK_MAX_DRIVES]; /* bytes of replicated experts the scheduler sent here */
} pack_source_stats;

/* Only valid on a source made by source_pack_create. */
void source_pack_stats(const expert_source *s, pack_source_stats *out);

#endif
