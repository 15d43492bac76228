/* The in-RAM expert provider: every routed expert of the layout is read
 * into memory at creation; begin/next hand out pointers in request order. */
#ifndef SLUICE_MEM_PROVIDER_H
#define SLUICE_MEM_PROVIDER_H

#include "experts/layout.h"
#include "experts/provider.h"
#include "util/err.h"

/* Loads the expert slices described by L (from L->g's files).  The provider
 * keeps its own copy of what it needs: L and its file may go afterwards. */
int mem_provider_create(expert_provider **out, const expert_layout *L, sl_err *err);

/* Bytes of expert weights held in RAM. */
uint64_t mem_provider_bytes(const expert_provider *p);

#endif
