/* JSON Schema to a GBNF grammar (grammar.h) whose strings are JSON
 * documents the schema accepts.
 *
 * Covered: type (one or a list), properties / required /
 * additionalProperties, enum, const, items / prefixItems / minItems /
 * maxItems, nested objects and arrays, anyOf / oneOf, local $ref
 * ("#/$defs/x", "#/definitions/x"), string minLength / maxLength and the
 * formats date, time, date-time and uuid.  Properties come in the schema's
 * order, the optional ones may be left out.  Not enforced (the grammar
 * cannot count them cheaply): minimum / maximum and other numeric bounds,
 * uniqueItems.  Refused with a message: pattern, allOf of more than one
 * schema, remote $ref.
 *
 * Whitespace between tokens is limited (a space, or a newline and up to 20
 * blanks) and numbers to 16 digits per part, so a model that would emit
 * whitespace or digits forever still has to move on. */
#ifndef SLUICE_JSON_SCHEMA_H
#define SLUICE_JSON_SCHEMA_H

#include <stddef.h>

#include "util/err.h"

/* SCHEMA (LEN bytes of JSON) to GBNF text in *GBNF (malloc'd, rule root).
 * Errors read "json_schema: at POINTER: what". */
int json_schema_to_gbnf(const char *schema, size_t len, char **gbnf, sl_err *err);
/* The same with the document's rule named ROOT (a grammar that embeds the
 * JSON in more text adds its own "root"). */
int json_schema_to_gbnf_as(const char *schema, size_t len, const char *root, char **gbnf, sl_err *err);

#endif
