/* Pre-tokenizer names and their split patterns, as llama.cpp maps them
 * (src/llama-vocab.cpp at 7e743c3a: llama_vocab::impl::load for the names
 * and flags, llm_tokenizer_bpe for the patterns).  The pattern strings are
 * llama.cpp's, byte for byte: several are recognised by string equality and
 * run by hand-written splitters there (and in pretok.c). */
#include <string.h>

#include "tok/pretok_table.h"
#include "tok/tok_internal.h"

#define CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"

const char RX_GPT2_PAT[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
const char RX_LLAMA3_PAT[] = CONTRACTIONS
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char RX_LLAMA3_ORIG_PAT[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)"
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char RX_QWEN2_PAT[] = CONTRACTIONS
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char RX_QWEN35_PAT[] = CONTRACTIONS
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char RX_KIMI_PAT[] = "\\p{Han}+";
const char RX_AFMOE_DIGITS_PAT[] = "\\p{AFMoE_digits}";
const char RX_NEWLINES_PAT[] = "[^\\n]+|[\\n]+";
const char RX_TINY_AYA_DIGITS_PAT[] = "\\d{1,3}(?=(?:\\d{3})*\\b)";

#define LETTER_WORDS_LOOKAHEAD(M)                                                                         \
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}" M "])([^a-z]))*((?=[\\p{L}" M "])([^A-Z]))+" CONTRACTIONS          \
    "?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}" M "])([^a-z]))+((?=[\\p{L}" M "])([^A-Z]))*" CONTRACTIONS        \
    "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

#define CASED_WORDS(N)                                                                                    \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+" CONTRACTIONS \
    "?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*" CONTRACTIONS \
    "?|" N "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

#define DEEPSEEK3_MAIN                                                                                    \
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"        \
    "| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"

#define PORO_PAT " ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+"
#define CJK_DEEPSEEK "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
#define CJK_KANA "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"

static const pre_rx RXS[] = {
    [RXS_DEFAULT] = {{"[\\p{P}\\$\\+<=>\\^~\\|]+", RX_GPT2_PAT, "\\p{N}+", "[0-9][0-9][0-9]"}},
    [RXS_LLAMA3] = {{RX_LLAMA3_PAT}},
    [RXS_JAIS2] = {{CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
                    "|\\s*[\\r\\n]+|\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!\\S)|\\s{64}(?!\\S)"
                    "|\\s{32}(?!\\S)|\\s{16}(?!\\S)|\\s{8}(?!\\S)|\\s{4}(?!\\S)|\\s{1,2}(?!\\S)|\\s{1}"}},
    [RXS_DEEPSEEK_LLM] = {{"[\r\n]",
                           "\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293"
                           "\u0295-\u02af\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c"
                           "\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5"
                           "\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77"
                           "\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59"
                           "\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc"
                           "\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107"
                           "\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139"
                           "\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee"
                           "\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e"
                           "\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f"
                           "\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2"
                           "\U000118a0-\U000118df\U0001e900-\U0001e943]+",
                           "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+", "\\s+$", CJK_DEEPSEEK,
                           "\\p{N}+"}},
    [RXS_DEEPSEEK3] = {{"\\p{N}{1,3}", CJK_KANA, DEEPSEEK3_MAIN}},
    [RXS_YOUTU] = {{"[\uac00-\ud7a3\u3131-\u318e]+|[\uff01\u2026\u201c\u201d\u2018\u2019\u2014\uff1a\uff1b\uff0c"
                    "\u3001-\u303f\ufe30-\ufe4f]+|[\u3105-\u312f]+|" CJK_KANA,
                    CASED_WORDS("\\p{N}")}},
    [RXS_DEEPSEEK_CODER] = {{"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", CJK_DEEPSEEK, "\\p{N}"}},
    [RXS_FALCON] = {{"[\\p{P}\\$\\+<=>\\^~\\|`]+", RX_GPT2_PAT, "[0-9][0-9][0-9]"}},
    [RXS_STARCODER] = {{"\\p{N}", RX_GPT2_PAT}},
    [RXS_GPT2] = {{RX_GPT2_PAT}},
    [RXS_QWEN2] = {{RX_QWEN2_PAT}},
    [RXS_QWEN35] = {{RX_QWEN35_PAT}},
    [RXS_PORO] = {{PORO_PAT}},
    [RXS_VIKING] = {{PORO_PAT, "\\p{N}"}},
    [RXS_TEKKEN] = {{"[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+"
                     "|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*"
                     "|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
    [RXS_CHAMELEON] = {{"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )", "\\p{N}",
                        "[\\p{P}!-/:-@\\[-`{-~]", RX_GPT2_PAT}},
    [RXS_GPT4O] = {{LETTER_WORDS_LOOKAHEAD("")}},
    [RXS_GRANITE_EMB_MULTI] = {{LETTER_WORDS_LOOKAHEAD("\\p{M}")}},
    [RXS_TINY_AYA] = {{RX_TINY_AYA_DIGITS_PAT, CASED_WORDS("\\p{N}{1,3}")}},
    [RXS_KIMI_K2] = {{RX_KIMI_PAT}},
    [RXS_SUPERBPE] = {{"\\p{N}+", "(?=(\\d{3})+(?!\\d))"}},
    [RXS_BAILINGMOE] = {{"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}"
                         "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"}},
    [RXS_SEED_CODER] = {{CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+"
                         "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
    [RXS_AFMOE] = {{RX_AFMOE_DIGITS_PAT,
                    "[\u4e00-\u9fff\u3400-\u4dbf\u8c48-\ufaff\u3040-\u309f\u30a0-\u30ff\uff65-\uff9f\u2f00-\u2fdf"
                    "\u0e40-\u0e7f\u0e80-\u0eff\u1780-\u17ff\u1000-\u109f\uaa60-\uaa7f\ua9e0-\ua9ff\uac00-\ud7af"
                    "\u1100-\u11ff]+",
                    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
                    "| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
    [RXS_LAGUNA] = {{RX_NEWLINES_PAT, RX_QWEN2_PAT}},
    [RXS_EXAONE_MOE] = {{CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}"
                         "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"}},
    [RXS_MINICPM5] = {{"\\p{N}{1,3}", CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+"
                                                   "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
};

#define C PRE_CLEAN_SPACES
#define IM PRE_IGNORE_MERGES
#define AB PRE_ADD_BOS

/* name -> pattern set and the flags llama.cpp sets with it (clean_spaces
 * starts true for BPE and most names turn it off). */
static const pre_def DEFS[] = {
    {"default", RXS_DEFAULT, C},
    {"minicpm5", RXS_MINICPM5, C | IM},
    {"llama3", RXS_LLAMA3, C | IM | AB},
    {"llama-v3", RXS_LLAMA3, C | IM | AB},
    {"llama-bpe", RXS_LLAMA3, C | IM | AB},
    {"falcon3", RXS_LLAMA3, C | IM | AB},
    {"falcon-h1", RXS_LLAMA3, C | IM | AB},
    {"pixtral", RXS_LLAMA3, C | IM | AB},
    {"midm-2.0", RXS_LLAMA3, C | IM | AB},
    {"lfm2", RXS_LLAMA3, C | IM | AB},
    {"jina-v5-nano", RXS_LLAMA3, C | IM | AB},
    {"deepseek-llm", RXS_DEEPSEEK_LLM, 0},
    {"deepseek-coder", RXS_DEEPSEEK_CODER, 0},
    {"deepseek-v3", RXS_DEEPSEEK3, 0},
    {"youtu", RXS_YOUTU, IM},
    {"falcon", RXS_FALCON, C},
    {"mpt", RXS_GPT2, C},
    {"starcoder", RXS_STARCODER, C},
    {"gpt-2", RXS_GPT2, C},
    {"phi-2", RXS_GPT2, C},
    {"jina-es", RXS_GPT2, C},
    {"jina-de", RXS_GPT2, C},
    {"gigachat", RXS_GPT2, C},
    {"jina-v2-es", RXS_GPT2, C},
    {"jina-v2-de", RXS_GPT2, C},
    {"a.x-4.0", RXS_GPT2, C},
    {"mellum", RXS_GPT2, C},
    {"modern-bert", RXS_GPT2, C},
    {"jais-2", RXS_JAIS2, C},
    {"jina-v1-en", RXS_GPT2, C},
    {"jina-v2-code", RXS_GPT2, C},
    {"roberta-bpe", RXS_GPT2, C},
    {"refact", RXS_STARCODER, C},
    {"command-r", RXS_STARCODER, 0},
    {"qwen2", RXS_QWEN2, 0},
    {"deepseek-r1-qwen", RXS_QWEN2, 0},
    {"kormo", RXS_QWEN2, 0},
    {"f2llmv2", RXS_QWEN2, 0},
    {"qwen35", RXS_QWEN35, 0},
    {"stablelm2", RXS_QWEN2, C},
    {"olmo", RXS_GPT2, C},
    {"dbrx", RXS_LLAMA3, C},
    {"smaug-bpe", RXS_LLAMA3, C},
    {"poro-chat", RXS_PORO, 0},
    {"glm4", RXS_LLAMA3, C | PRE_NO_BOS_ID},
    {"chatglm-bpe", RXS_LLAMA3, C | PRE_NO_BOS_ID},
    {"viking", RXS_VIKING, 0},
    {"jais", RXS_GPT2, C},
    {"tekken", RXS_TEKKEN, IM | AB},
    {"smollm", RXS_STARCODER, 0},
    {"codeshell", RXS_STARCODER, C},
    {"bloom", RXS_PORO, C},
    {"gpt3-finnish", RXS_PORO, C},
    {"exaone", RXS_STARCODER, C},
    {"exaone4", RXS_GPT2, C},
    {"exaone-moe", RXS_EXAONE_MOE, C},
    {"chameleon", RXS_CHAMELEON, AB},
    {"minerva-7b", RXS_STARCODER, C},
    {"megrez", RXS_QWEN2, C},
    {"gpt-4o", RXS_GPT4O, 0},
    {"llama4", RXS_GPT4O, 0},
    {"kanana2", RXS_GPT4O, 0},
    {"talkie", RXS_GPT4O, 0},
    {"granite-embed-multi-97m", RXS_GRANITE_EMB_MULTI, IM},
    {"tiny_aya", RXS_TINY_AYA, 0},
    {"cohere2moe", RXS_TINY_AYA, 0},
    {"superbpe", RXS_SUPERBPE, 0},
    {"trillion", RXS_GPT2, 0},
    {"granite-docling", RXS_GPT2, 0},
    {"bailingmoe", RXS_BAILINGMOE, 0},
    {"bailingmoe2", RXS_BAILINGMOE, 0},
    {"llada-moe", RXS_BAILINGMOE, 0},
    {"seed-coder", RXS_SEED_CODER, 0},
    {"hunyuan", RXS_QWEN2, 0},
    {"hunyuan-dense", RXS_DEEPSEEK3, 0},
    {"joyai-llm", RXS_DEEPSEEK3, 0},
    {"kimi-k2", RXS_KIMI_K2, 0},
    {"grok-2", RXS_QWEN2, 0},
    {"afmoe", RXS_AFMOE, 0},
    {"laguna", RXS_LAGUNA, 0},
    {"minimax-m2", RXS_GPT4O, 0},
    {"solar-open", RXS_QWEN2, 0},
    {"mellum2", RXS_STARCODER, C},
};

/* Names llama.cpp knows whose tokenizers sluice does not implement (they
 * work on raw UTF-8 with SentencePiece-style spaces, not byte-level BPE). */
static const char *const UNSUPPORTED[] = {"gemma4", "granite-embed-multi-311m", "sarvam-moe", "whitespace"};

const pre_def *pre_find(const char *name, bool *known_unsupported)
{
    *known_unsupported = false;
    for (size_t i = 0; i < sizeof DEFS / sizeof DEFS[0]; i++)
        if (!strcmp(DEFS[i].name, name)) return &DEFS[i];
    for (size_t i = 0; i < sizeof UNSUPPORTED / sizeof UNSUPPORTED[0]; i++)
        if (!strcmp(UNSUPPORTED[i], name)) *known_unsupported = true;
    return NULL;
}

const pre_rx *pre_patterns(int set) { return &RXS[set]; }

size_t pre_count(void) { return sizeof DEFS / sizeof DEFS[0]; }
const pre_def *pre_at(size_t i) { return i < pre_count() ? &DEFS[i] : NULL; }
