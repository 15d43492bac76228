/* The pre-tokenizer table (pretok_table.c). */
#ifndef SLUICE_PRETOK_TABLE_H
#define SLUICE_PRETOK_TABLE_H

#include <stdbool.h>
#include <stddef.h>

enum {
    RXS_DEFAULT, RXS_LLAMA3, RXS_JAIS2, RXS_DEEPSEEK_LLM, RXS_DEEPSEEK3, RXS_YOUTU, RXS_DEEPSEEK_CODER,
    RXS_FALCON, RXS_STARCODER, RXS_GPT2, RXS_QWEN2, RXS_QWEN35, RXS_PORO, RXS_VIKING, RXS_TEKKEN,
    RXS_CHAMELEON, RXS_GPT4O, RXS_GRANITE_EMB_MULTI, RXS_TINY_AYA, RXS_KIMI_K2, RXS_SUPERBPE,
    RXS_BAILINGMOE, RXS_SEED_CODER, RXS_AFMOE, RXS_LAGUNA, RXS_EXAONE_MOE, RXS_MINICPM5,
};

#define PRE_MAX_RX 8

typedef struct {
    const char *rx[PRE_MAX_RX]; /* applied in order, NULL-terminated */
} pre_rx;

typedef struct {
    const char *name;
    int set;
    unsigned flags; /* PRE_* from tok_internal.h */
} pre_def;

/* Patterns llama.cpp runs with hand-written code instead of std::regex. */
extern const char RX_GPT2_PAT[], RX_LLAMA3_PAT[], RX_LLAMA3_ORIG_PAT[], RX_QWEN2_PAT[], RX_QWEN35_PAT[],
    RX_KIMI_PAT[], RX_AFMOE_DIGITS_PAT[], RX_NEWLINES_PAT[], RX_TINY_AYA_DIGITS_PAT[];

const pre_def *pre_find(const char *name, bool *known_unsupported);
const pre_rx *pre_patterns(int set);
size_t pre_count(void);
const pre_def *pre_at(size_t i);

#endif
