/* An SVG timeline of a streamed decode (sluice bench --timeline): one row
 * per token, time left to right, and in each row the layers, every read
 * from submission to landing (demand / prefetch / dropped guess), the disk's
 * busy time, each expert's compute and the time compute waited on a read,
 * so a glance says whether the disk or the CPU set the pace. */
#ifndef SLUICE_TIMELINE_SVG_H
#define SLUICE_TIMELINE_SVG_H

#include <stddef.h>

#include "experts/store.h"
#include "util/err.h"

/* Events EV[0..n) within [t_from, t_to); rows start at each begin() of
 * the lowest layer; at most MAX_ROWS rows are drawn. */
int timeline_svg_write(const char *path, const store_event *ev, size_t n, double t_from, double t_to,
                       const char *title, int max_rows, sl_err *err);

#endif
