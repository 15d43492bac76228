/* GBNF grammars: the parser's error messages name line and column; the
 * matcher against hand-written strings it must accept or reject (whole
 * strings, prefixes, byte-by-byte UTF-8), and the token check a sampler
 * uses (end-of-generation only at an end, control tokens never). */
#include <math.h>

#include "decode/grammar.h"
#include "decode/sampler.h"
#include "t.h"

static sl_grammar *parse(const char *src)
{
    sl_err e;
    sl_grammar *g = NULL;
    if (grammar_parse(&g, src, strlen(src), &e)) T_CHECK(0, "parse failed: %s", e.msg);
    return g;
}

static void expect(sl_grammar *g, const char *s, bool want)
{
    if (!g) return;
    bool got = grammar_accepts(g, s, strlen(s));
    T_CHECK(got == want, "'%s' should be %s", s, want ? "accepted" : "rejected");
}

static void check_strings(const char *name, const char *src, const char *const *yes, const char *const *no)
{
    t_begin(name);
    sl_grammar *g = parse(src);
    for (; yes && *yes; yes++) expect(g, *yes, true);
    for (; no && *no; no++) expect(g, *no, false);
    grammar_free(g);
    t_end();
}

static const char ARITH[] =
    "# integer arithmetic\n"
    "root  ::= expr\n"
    "expr  ::= term ((\"+\" | \"-\") term)*\n"
    "term  ::= factor ((\"*\" | \"/\") factor)*\n"
    "factor ::= [0-9]+ | \"(\" expr \")\"\n";

static void test_matching(void)
{
    check_strings("grammar: arithmetic accepts expressions, rejects the rest", ARITH,
                  (const char *[]){"1", "12+3", "(1+2)*3", "((7))", "1*2/3-4", NULL},
                  (const char *[]){"", "+", "1+", "(1", "1)", "a", "1 + 2", "()", NULL});
    check_strings("grammar: classes, negation, ranges, any, escapes",
                  "root ::= [a-cx] [^0-9\\]] . \"\\x41\\u00e9\\n\\\"\\\\\" [\\t-\\r]",
                  (const char *[]){"a!zA\xc3\xa9\n\"\\\t", "x~\xe2\x82\xac" "A\xc3\xa9\n\"\\\r", NULL},
                  (const char *[]){"d!zA\xc3\xa9\n\"\\\t", "a5zA\xc3\xa9\n\"\\\t", "a]zA\xc3\xa9\n\"\\\t", "a!zA\xc3\xa9\n\"\\ ",
                                   NULL});
    check_strings("grammar: {m,n} {m,} {m} ? + * count as llama.cpp's",
                  "root ::= \"a\"{2,3} \"b\"{2,} \"c\"{2} \"d\"? \"e\"+ \"f\"*",
                  (const char *[]){"aabbcce", "aaabbbbccdeeff", "aabbccdef", NULL},
                  (const char *[]){"abbcce", "aaaabbcce", "aabcce", "aabbccc e", "aabbccdd e", "aabbcc", NULL});
    check_strings("grammar: a repeated group and a multi-character literal",
                  "root ::= (\"ab\" | [0-9]){1,2} \"xy\"*\n",
                  (const char *[]){"ab", "1ab", "ab7xyxy", NULL}, (const char *[]){"", "a", "ababab", "x", "abxyx", NULL});
    check_strings("grammar: newlines in groups, after | and a continuation line",
                  "root ::= ( \"a\" |\n   \"b\" )\n    | \"c\"  # comment\nother ::= \"unused\"\n",
                  (const char *[]){"a", "b", "c", NULL}, (const char *[]){"d", "ab", NULL});
    check_strings("grammar: empty alternatives and right recursion",
                  "root ::= item root | \"\"\nitem ::= \"x\" | \"yz\"",
                  (const char *[]){"", "x", "yzxyz", NULL}, (const char *[]){"y", "xy", NULL});
}

static void test_prefixes(void)
{
    t_begin("grammar: incremental acceptance, can_end, and UTF-8 split across tokens");
    sl_grammar *g = parse("root ::= \"[\" [\\u00e0-\\u00ff]+ \"]\"");
    gram_state *m = NULL;
    sl_err e;
    if (g && gstate_new(&m, g, &e)) T_CHECK(0, "%s", e.msg);
    if (m) {
        T_CHECK(!gstate_can_end(m), "empty input cannot end");
        T_CHECK(gstate_accept(m, "[", 1) == 0, "'[' accepted");
        T_CHECK(!gstate_allows(m, "]", 1), "']' before a letter");
        T_CHECK(gstate_allows(m, "\xc3", 1), "lead byte of U+00E9 (could become U+00C0..U+00FF)");
        T_CHECK(!gstate_allows(m, "\xe2", 1), "lead byte of a 3-byte sequence (above U+00FF)");
        T_CHECK(!gstate_allows(m, "\xa9", 1), "a stray continuation byte");
        T_CHECK(!gstate_allows(m, "\xc1", 1) && !gstate_allows(m, "\xe0\x83", 2), "overlong encodings");
        T_CHECK(gstate_accept(m, "\xc3", 1) == 0, "lead byte accepted");
        T_CHECK(!gstate_can_end(m), "inside a character");
        T_CHECK(!gstate_allows(m, "]", 1), "']' inside a UTF-8 sequence");
        T_CHECK(!gstate_allows(m, "\x80", 1), "U+00C0 is below the class");
        T_CHECK(gstate_accept(m, "\xa9\xc3\xa8", 3) == 0, "completes U+00E9, then U+00E8");
        T_CHECK(gstate_accept(m, "x", 1) == 1, "'x' refused");
        T_CHECK(gstate_accept(m, "]", 1) == 0, "']' closes");
        T_CHECK(gstate_can_end(m), "complete");
        T_CHECK(!gstate_allows(m, "]", 1), "nothing after the end");
    }
    gram_state *c = NULL;
    if (g && gstate_new(&c, g, &e) == 0 && m) {
        T_CHECK(gstate_copy(c, m) == 0 && gstate_can_end(c), "a copy carries the state");
        gstate_free(c);
    }
    gstate_free(m);
    grammar_free(g);
    t_end();
}

static void test_tokens(void)
{
    t_begin("grammar: token checks: EOG only at an end, empty (control) tokens never");
    sl_grammar *g = parse("root ::= \"ab\" \"c\"?");
    /* tokens: 0 "a", 1 "ab", 2 "b", 3 "c", 4 "" (control), 5 EOG, 6 "abc" */
    static const char bytes[] = "aabbcabc";
    static const uint32_t off[] = {0, 1, 3, 4, 5, 5, 5, 8};
    static const uint8_t eog[] = {0, 0, 0, 0, 0, 1, 0};
    gram_tokens t = {7, bytes, off, eog};
    gram_state *m = NULL;
    sl_err e;
    if (g && gstate_new(&m, g, &e)) T_CHECK(0, "%s", e.msg);
    if (m) {
        bool want0[] = {1, 1, 0, 0, 0, 0, 1};
        for (int i = 0; i < 7; i++) T_CHECK(gstate_allows_token(m, &t, i) == want0[i], "start: token %d", i);
        T_CHECK(gstate_accept(m, "ab", 2) == 0, "ab");
        bool want1[] = {0, 0, 0, 1, 0, 1, 0};
        for (int i = 0; i < 7; i++) T_CHECK(gstate_allows_token(m, &t, i) == want1[i], "after ab: token %d", i);
        T_CHECK(!gstate_allows_token(m, &t, 7) && !gstate_allows_token(m, &t, -1), "ids outside the table");
    }
    gstate_free(m);
    grammar_free(g);
    t_end();
}

/* A bad grammar's message must start with "grammar:LINE:COL: " and say WHAT. */
static void bad(const char *src, const char *where, const char *what)
{
    sl_err e = {{0}};
    sl_grammar *g = NULL;
    if (grammar_parse(&g, src, strlen(src), &e) == 0) {
        T_CHECK(0, "accepted: %s", src);
        grammar_free(g);
        return;
    }
    T_CHECK(!strncmp(e.msg, where, strlen(where)), "'%s': message '%s' should start with '%s'", src, e.msg, where);
    T_CHECK(strstr(e.msg, what) != NULL, "'%s': message '%s' should say '%s'", src, e.msg, what);
}

static void test_errors(void)
{
    t_begin("grammar: errors name the line and column");
    bad("root ::= \"abc", "grammar:1:10:", "unterminated string");
    bad("root ::= x\n\nx ::= [a-", "grammar:3:7:", "unterminated character class");
    bad("root ::= foo", "grammar:1:10:", "rule 'foo' is used but not defined");
    bad("main ::= \"a\"", "grammar:", "no rule named 'root'");
    bad("root ::= (\"a\" | \"b\"", "grammar:1:10:", "'(' is not closed");
    bad("root ::= \"a\"\n  ::= \"b\"", "grammar:2:3:", "expected a rule name");
    bad("root \"a\"", "grammar:1:6:", "expected '::='");
    bad("root ::= * \"a\"", "grammar:1:10:", "nothing before it to repeat");
    bad("root ::= \"a\"{3,2}", "grammar:1:13:", "maximum below its minimum");
    bad("root ::= [z-a]", "grammar:1:11:", "reversed");
    bad("root ::= \"\\q\"", "grammar:1:11:", "unknown escape");
    bad("root ::= \"a\" ; \"b\"", "grammar:1:14:", "unexpected ';'");
    bad("root ::= \"a\"\nroot ::= \"b\"", "grammar:2:1:", "already defined (line 1)");
    bad("root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\"", "grammar:2:1:", "left-recursive");
    bad("root ::= e? root \"x\"\ne ::= \"y\"", "grammar:1:1:", "left-recursive");
    bad("root ::= \"\\x4\"", "grammar:1:11:", "2 hex digits");
    bad("root ::= \"a\"{20000}", "grammar:1:14:", "above 10000");
    bad("root ::= \"\xff\"", "grammar:1:11:", "invalid UTF-8");
    t_end();
}

/* ---- the sampler under a grammar, on a 6-token vocabulary ---- */

/* 0 "a", 1 "b", 2 "{", 3 "}", 4 end of generation, 5 a control token (no text) */
static const char TOY_BYTES[] = "ab{}";
static const uint32_t TOY_OFF[] = {0, 1, 2, 3, 4, 4, 4};
static const uint8_t TOY_EOG[] = {0, 0, 0, 0, 1, 0};
static const gram_tokens TOY = {6, TOY_BYTES, TOY_OFF, TOY_EOG};

static sl_sampler *toy_sampler(const char *gbnf, float temp, uint32_t seed)
{
    sampler_params p = sampler_defaults();
    p.temp = temp, p.top_k = 0, p.top_p = 1, p.min_p = 0, p.seed = seed;
    sl_err e;
    sl_sampler *s = NULL;
    sl_grammar *g = parse(gbnf);
    gram_state *m = NULL;
    if (!g || sampler_create(&s, &p, 6, &e) || gstate_new(&m, g, &e) || sampler_set_grammar(s, m, &TOY, &e)) {
        T_CHECK(0, "toy sampler: %s", e.msg);
        sampler_free(s);
        s = NULL;
    }
    grammar_free(g);
    return s;
}

static void test_sampler(void)
{
    t_begin("grammar: greedy picks the best allowed token; EOG only once the grammar can end");
    sl_sampler *s = toy_sampler("root ::= \"{\" \"a\"* \"}\"", 0, 1);
    if (s) {
        float l1[] = {1, 5, 2, 0, 9, 8};                   /* EOG and the control token lead */
        T_CHECK(sampler_sample(s, l1) == 2, "first token '{'");
        sampler_accept(s, 2);
        float l2[] = {1, 5, 2, 0, 9, 8};
        T_CHECK(sampler_sample(s, l2) == 0, "then 'a' (b, '{', EOG refused)");
        sampler_accept(s, 0);
        float l3[] = {1, 5, 2, 3, 9, 8};
        T_CHECK(sampler_sample(s, l3) == 3, "then '}' (above 'a')");
        sampler_accept(s, 3);
        T_CHECK(sampler_sample(s, l3) == 4, "then EOG, the only token left");
        sl_sampler *c = NULL;
        sl_err e;
        T_CHECK(sampler_clone(&c, s, &e) == 0, "clone: %s", e.msg);
        if (c) T_CHECK(sampler_sample(c, l1) == 4, "a clone carries the grammar state");
        sampler_free(c);
    }
    sampler_free(s);
    t_end();

    t_begin("grammar: sampled draws are always allowed; candidates hold only allowed tokens");
    s = toy_sampler("root ::= [ab]+ \"}\"", 1.0f, 7);
    int bad = 0, seen[6] = {0};
    for (int i = 0; s && i < 2000; i++) {
        float l[] = {0.1f, 0.2f, 3, 2, 4, 4};
        int32_t id = sampler_sample(s, l);
        seen[id]++;
        bad += id > 1;
    }
    T_CHECK(bad == 0 && seen[0] > 0 && seen[1] > 0, "refused tokens drawn %d times (a %d, b %d)", bad, seen[0], seen[1]);
    if (s) {
        const sl_cand *c;
        float l[] = {0.1f, 0.2f, 3, 2, 4, 4};
        size_t n = sampler_candidates(s, l, &c);
        double sum = 0;
        for (size_t i = 0; i < n; i++) {
            sum += c[i].p;
            T_CHECK(c[i].id <= 1, "candidate %d refused", c[i].id);
        }
        T_CHECK(n == 2 && fabs(sum - 1) < 1e-6, "%zu candidates, mass %g", n, sum);
    }
    sampler_free(s);
    t_end();

    t_begin("grammar: a grammar no token can satisfy ends generation (the first EOG token)");
    s = toy_sampler("root ::= \"x\"", 0, 1);
    float l[] = {1, 2, 3, 4, 0, 5};
    if (s) T_CHECK(sampler_sample(s, l) == 4, "fallback to EOG");
    sampler_free(s);
    t_end();
}

int main(void)
{
    test_sampler();
    test_matching();
    test_prefixes();
    test_tokens();
    test_errors();
    return t_done();
}
