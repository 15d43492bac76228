/* SVG heat map of expert heat (layers x experts). */
#ifndef SLUICE_HEAT_SVG_H
#define SLUICE_HEAT_SVG_H

#include <stdio.h>

#include "experts/heat.h"

/* Writes the map to F, titled with MODEL_NAME (escaped); -1 if F failed. */
int heat_svg_write(const heat_table *h, const char *model_name, FILE *f);

#endif
