/* JSON Schema to GBNF: each schema's grammar against hand-written JSON
 * documents it must accept (valid under the schema) or reject (invalid),
 * and the messages for what is not supported. */
#include <stdlib.h>

#include "decode/grammar.h"
#include "decode/json_schema.h"
#include "t.h"

static void check(const char *name, const char *schema, const char *const *yes, const char *const *no)
{
    t_begin(name);
    char *gbnf = NULL;
    sl_err e;
    sl_grammar *g = NULL;
    if (json_schema_to_gbnf(schema, strlen(schema), &gbnf, &e)) T_CHECK(0, "convert: %s", e.msg);
    else if (grammar_parse(&g, gbnf, strlen(gbnf), &e)) T_CHECK(0, "parse: %s\n%s", e.msg, gbnf);
    for (; g && yes && *yes; yes++) T_CHECK(grammar_accepts(g, *yes, strlen(*yes)), "should accept %s", *yes);
    for (; g && no && *no; no++) T_CHECK(!grammar_accepts(g, *no, strlen(*no)), "should reject %s", *no);
    grammar_free(g);
    free(gbnf);
    t_end();
}

#define L(...) ((const char *[]){__VA_ARGS__, NULL})

static void test_shapes(void)
{
    check("json_schema: object with required, optional, enum items and maxItems",
          "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":12},\"age\":{\"type\":\"integer\"},"
          "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\"]},\"maxItems\":3}},\"required\":[\"name\",\"age\"]}",
          L("{\"name\":\"x\",\"age\":3}", "{\"name\":\"x\",\"age\":3,\"tags\":[\"a\",\"b\",\"a\"]}",
            "{ \"name\" : \"\\u00e9\\\"q\" , \"age\" : -30 }", "{\"name\":\"\",\"age\":0,\"tags\":[]}"),
          L("{\"age\":3}", "{\"name\":1,\"age\":3}", "{\"name\":\"x\",\"age\":3,\"z\":1}",
            "{\"name\":\"x\",\"age\":3,\"tags\":[\"a\",\"a\",\"a\",\"a\"]}", "{\"name\":\"x\",\"age\":3,\"tags\":[\"c\"]}",
            "{\"name\":\"0123456789abc\",\"age\":3}", "{\"name\":\"x\",\"age\":3.5}", "{\"name\":\"x\",\"age\":03}",
            "{\"age\":3,\"name\":\"x\"}", "{\"name\":\"a\nb\",\"age\":3}"));
    check("json_schema: optional properties before and after a required one (commas)",
          "{\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"},\"c\":{\"type\":\"integer\"}},"
          "\"required\":[\"b\"]}",
          L("{\"b\":1}", "{\"a\":1,\"b\":2}", "{\"b\":1,\"c\":2}", "{\"a\":1,\"b\":2,\"c\":3}"),
          L("{}", "{\"a\":1}", "{\"a\":1,,\"b\":1}", "{,\"b\":1}", "{\"b\":1,}", "{\"a\":1 \"b\":1}"));
    check("json_schema: all optional", "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"boolean\"},\"y\":{\"type\":\"null\"}}}",
          L("{}", "{\"y\":null}", "{\"x\":true,\"y\":null}"), L("{,}", "{\"x\":1}", "{\"y\":null,\"x\":true}"));
    check("json_schema: anyOf, oneOf, type lists, const",
          "{\"type\":\"object\",\"properties\":{\"u\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"null\"}]},"
          "\"o\":{\"oneOf\":[{\"const\":{\"k\":[1,2]}},{\"type\":\"number\"}]},\"t\":{\"type\":[\"integer\",\"boolean\"]}},"
          "\"required\":[\"u\",\"o\",\"t\"]}",
          L("{\"u\":\"s\",\"o\":{\"k\":[1,2]},\"t\":5}", "{\"u\":null,\"o\":-1.5e3,\"t\":false}"),
          L("{\"u\":1,\"o\":1,\"t\":1}", "{\"u\":null,\"o\":{\"k\":[1]},\"t\":1}", "{\"u\":null,\"o\":1,\"t\":\"x\"}"));
    check("json_schema: arrays with minItems/maxItems and prefixItems",
          "{\"type\":\"object\",\"properties\":{\"r\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,"
          "\"maxItems\":3},\"p\":{\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}},\"required\":[\"r\",\"p\"]}",
          L("{\"r\":[1,2],\"p\":[\"a\",1]}", "{\"r\":[1,2,3],\"p\":[\"\",-1]}"),
          L("{\"r\":[1],\"p\":[\"a\",1]}", "{\"r\":[1,2,3,4],\"p\":[\"a\",1]}", "{\"r\":[1,2],\"p\":[1,\"a\"]}",
            "{\"r\":[1,2],\"p\":[\"a\"]}"));
    check("json_schema: a recursive $ref and $defs",
          "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
          "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\"]}},\"$ref\":\"#/$defs/node\"}",
          L("{\"v\":1}", "{\"v\":1,\"kids\":[{\"v\":2},{\"v\":3,\"kids\":[{\"v\":4}]}]}"), L("{\"v\":1,\"kids\":[1]}", "{}"));
    check("json_schema: string formats and lengths",
          "{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\",\"format\":\"date\"},{\"type\":\"string\",\"format\":\"uuid\"},"
          "{\"type\":\"string\",\"format\":\"date-time\"},{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}]}",
          L("[\"2024-01-31\",\"123e4567-e89b-12d3-a456-426614174000\",\"2024-02-29T23:59:60Z\",\"ab\"]",
            "[\"1999-12-01\",\"00000000-0000-0000-0000-000000000000\",\"2000-01-01T00:00:00.5+01:00\",\"abc\"]"),
          L("[\"2024-13-01\",\"123e4567-e89b-12d3-a456-426614174000\",\"2024-02-29T23:59:60Z\",\"ab\"]",
            "[\"2024-01-31\",\"123e4567e89b12d3a456426614174000\",\"2024-02-29T23:59:60Z\",\"ab\"]",
            "[\"2024-01-31\",\"123e4567-e89b-12d3-a456-426614174000\",\"2024-02-29\",\"ab\"]",
            "[\"2024-01-31\",\"123e4567-e89b-12d3-a456-426614174000\",\"2024-02-29T23:59:60Z\",\"a\"]",
            "[\"2024-01-31\",\"123e4567-e89b-12d3-a456-426614174000\",\"2024-02-29T23:59:60Z\",\"abcd\"]"));
    check("json_schema: {} is any JSON value; additionalProperties as a schema", "{}",
          L("[1,{\"a\":null},\"x\",true]", "-0.5", "{}", "\"\""), L("[1,]", "{\"a\"}", "nul", "01"));
    check("json_schema: a map of integers", "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}",
          L("{}", "{\"x\":1,\"y\":-2}"), L("{\"x\":\"s\"}", "{\"x\":1,}"));
}

static void bad(const char *schema, const char *want)
{
    char *gbnf = NULL;
    sl_err e = {{0}};
    if (json_schema_to_gbnf(schema, strlen(schema), &gbnf, &e) == 0) {
        T_CHECK(0, "accepted %s", schema);
        free(gbnf);
        return;
    }
    T_CHECK(strstr(e.msg, want) != NULL, "'%s': message '%s' should contain '%s'", schema, e.msg, want);
}

static void test_errors(void)
{
    t_begin("json_schema: unsupported and broken schemas name where");
    bad("{\"properties\":{\"p\":{\"type\":\"string\",\"pattern\":\"a+\"}}}", "json_schema: at /properties/p: 'pattern' is not supported");
    bad("{\"type\":\"objekt\"}", "at /: unknown type 'objekt'");
    bad("{\"$ref\":\"http://example.com/s.json\"}", "is not local");
    bad("{\"$ref\":\"#/$defs/missing\"}", "points to nothing");
    bad("{\"allOf\":[{},{}]}", "'allOf' is supported with one schema only");
    bad("{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", "maxItems 2 is below minItems 3");
    bad("{\"type\": ", "json_schema: not JSON");
    bad("{\"enum\":[]}", "'enum' must be a non-empty array");
    t_end();
}

int main(void)
{
    test_shapes();
    test_errors();
    return t_done();
}
