/* Internals shared by the pack writer (pack.c), the format code
 * (pack_format.c) and the pack reader (source_pack.c). */
#ifndef SLUICE_PACK_FORMAT_H
#define SLUICE_PACK_FORMAT_H

#include <stdint.h>

#include "experts/pack.h"

enum { PACK_LAYER_ENTRY_BYTES = 16 + EXPERT_MAX_PARTS * PACK_PART_ENTRY_BYTES };

void pk_put_u32(uint8_t *p, uint32_t v);
void pk_put_u64(uint8_t *p, uint64_t v);
uint32_t pk_get_u32(const uint8_t *p);
uint64_t pk_get_u64(const uint8_t *p);

/* Serialises M (with its trailer checksum) into a new heap buffer. */
int pack_manifest_encode(const pack_manifest *m, uint8_t **out, uint64_t *len, sl_err *err);

/* The 4096-byte header of drive D's file. */
void pack_drive_header_encode(const pack_manifest *m, uint32_t d, uint8_t *b);

#endif
