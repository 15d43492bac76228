// goldtool: record llama.cpp "golden" outputs for a GGUF model (used by fixtures/arch/gen_arch_fixtures.py).
//
//   goldtool MODEL.gguf PROMPTS.hex OUT.raw.json OUT.logits.f32 N_GREEDY N_TOPK_STEPS TOPK [--defaults]
//
// --defaults (sluice's copy; the rest is ../shared/tools/goldtool as it was): llama.cpp's own context
// defaults for the KV cache and attention, type_k = type_v = f16 and flash_attn_type = auto (on for the
// CPU backend), instead of f32 K/V without flash attention.  n_ctx 256 (so the KV view stays below the
// 512 cells where ggml switches decode to its thread-dependent split-KV kernel), n_batch = n_ubatch = 256
// and 1 thread as before: a prompt of >= 64 tokens runs ggml's tiled flash kernel, shorter ones and the
// greedy steps its one-row kernel, which is what sluice's default mode reproduces.
//
// PROMPTS.hex: one prompt per line, UTF-8 bytes hex-encoded; a line "ids:1,2,3" gives token ids directly
// (no tokenization; used to run the golden checker's logic against llama.cpp itself).
// For each prompt a fresh context is created (CPU, n_ctx 256, n_batch = n_ubatch = 256, 1 thread,
// f32 K/V cache, flash attention off). The prompt is tokenized (add_special = true, parse_special = false),
// decoded as one batch, and the logits of its last position are appended to OUT.logits.f32 (float32 LE).
// Then N_GREEDY greedy steps follow (argmax, ties to the lowest id, EOS not special), one token per decode.
// At every greedy step the top-1/top-2 gap and the logit range are recorded, and at the first N_TOPK_STEPS
// steps the TOPK candidates (sorted by logit descending, then id ascending).
// OUT.raw.json gets n_vocab, add_bos, model_desc, settings, system_info and prompts[] (tokens, greedy,
// greedy_top2_gap, greedy_logit_range, topk); gen_arch_fixtures.py merges it into the golden JSON.
#include "llama.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

static std::string unhex(const std::string & h) {
    std::string out;
    for (size_t i = 0; i + 1 < h.size(); i += 2) {
        out.push_back((char) strtol(h.substr(i, 2).c_str(), nullptr, 16));
    }
    return out;
}

static std::string json_str(const std::string & s) {
    std::string o = "\"";
    for (unsigned char c : s) {
        switch (c) {
            case '"':  o += "\\\""; break;
            case '\\': o += "\\\\"; break;
            case '\n': o += "\\n";  break;
            case '\r': o += "\\r";  break;
            case '\t': o += "\\t";  break;
            default:
                if (c < 0x20) { char b[8]; snprintf(b, sizeof b, "\\u%04x", c); o += b; }
                else o.push_back((char) c);
        }
    }
    return o + "\"";
}

static std::string fmt(const char * f, double v) {
    char b[64];
    snprintf(b, sizeof b, f, v);
    return b;
}

int main(int argc, char ** argv) {
    const bool defaults = argc == 9 && std::string(argv[8]) == "--defaults";
    if (argc != 8 && !defaults) {
        fprintf(stderr, "usage: %s MODEL PROMPTS.hex OUT.raw.json OUT.logits.f32 N_GREEDY N_TOPK_STEPS TOPK [--defaults]\n", argv[0]);
        return 2;
    }
    const char * model_path = argv[1];
    const int n_greedy = atoi(argv[5]);
    const int n_topk_steps = atoi(argv[6]);
    const int topk = atoi(argv[7]);

    std::vector<std::string> prompts;
    std::vector<std::vector<llama_token>> prompt_ids;
    {
        std::ifstream in(argv[2]);
        std::string line;
        while (std::getline(in, line)) {
            while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
            if (line.empty()) continue;
            std::vector<llama_token> ids;
            if (line.rfind("ids:", 0) == 0) {
                for (size_t p = 4; p < line.size();) {
                    size_t q = line.find(',', p);
                    if (q == std::string::npos) q = line.size();
                    ids.push_back((llama_token) atoi(line.substr(p, q - p).c_str()));
                    p = q + 1;
                }
                prompts.push_back("");
            } else {
                prompts.push_back(unhex(line));
            }
            prompt_ids.push_back(ids);
        }
    }

    llama_backend_init();

    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model * model = llama_model_load_from_file(model_path, mp);
    if (!model) { fprintf(stderr, "failed to load %s\n", model_path); return 1; }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);

    char desc[256];
    llama_model_desc(model, desc, sizeof desc);

    FILE * flog = fopen(argv[4], "wb");
    if (!flog) { fprintf(stderr, "cannot write %s\n", argv[4]); return 1; }

    std::string pj = "[";
    for (size_t ip = 0; ip < prompts.size(); ++ip) {
        llama_context_params cp = llama_context_default_params();
        cp.n_ctx = 256;
        cp.n_batch = 256;
        cp.n_ubatch = 256;
        cp.n_seq_max = 1;
        cp.n_threads = 1;
        cp.n_threads_batch = 1;
        if (!defaults) {
            cp.type_k = GGML_TYPE_F32;
            cp.type_v = GGML_TYPE_F32;
            cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
        }
        llama_context * ctx = llama_init_from_model(model, cp);
        if (!ctx) { fprintf(stderr, "failed to create context\n"); return 1; }

        const std::string & text = prompts[ip];
        std::vector<llama_token> toks = prompt_ids[ip];
        if (toks.empty()) {
            int n = -llama_tokenize(vocab, text.c_str(), (int) text.size(), nullptr, 0, true, false);
            toks.resize(n);
            if (llama_tokenize(vocab, text.c_str(), (int) text.size(), toks.data(), n, true, false) != n) {
                fprintf(stderr, "tokenize failed\n"); return 1;
            }
        }

        if (llama_decode(ctx, llama_batch_get_one(toks.data(), (int) toks.size())) != 0) {
            fprintf(stderr, "prompt decode failed\n"); return 1;
        }

        std::vector<llama_token> greedy;
        std::vector<float> gaps, ranges;
        std::string tk = "[";
        std::vector<int> idx(n_vocab);
        for (int s = 0; s < n_greedy; ++s) {
            const float * lg = llama_get_logits_ith(ctx, -1);
            if (!lg) { fprintf(stderr, "no logits\n"); return 1; }
            if (s == 0) fwrite(lg, sizeof(float), n_vocab, flog);
            int best = 0;
            float mn = lg[0], mx = lg[0];
            for (int i = 1; i < n_vocab; ++i) {
                if (lg[i] > lg[best]) best = i;
                mn = std::min(mn, lg[i]);
                mx = std::max(mx, lg[i]);
            }
            float second = -INFINITY;
            for (int i = 0; i < n_vocab; ++i) {
                if (i != best && lg[i] > second) second = lg[i];
            }
            greedy.push_back(best);
            gaps.push_back(lg[best] - second);
            ranges.push_back(mx - mn);
            if (s < n_topk_steps) {
                for (int i = 0; i < n_vocab; ++i) idx[i] = i;
                std::partial_sort(idx.begin(), idx.begin() + topk, idx.end(), [&](int a, int b) {
                    return lg[a] != lg[b] ? lg[a] > lg[b] : a < b;
                });
                std::string ids = "[", lv = "[";
                for (int j = 0; j < topk; ++j) {
                    ids += (j ? ", " : "") + std::to_string(idx[j]);
                    lv += (j ? ", " : "") + fmt("%.9g", lg[idx[j]]);
                }
                tk += std::string(s ? ", " : "") + "{\"step\": " + std::to_string(s) + ", \"ids\": " + ids + "], \"logits\": " + lv + "]}";
            }
            if (s + 1 < n_greedy) {
                llama_token t = best;
                if (llama_decode(ctx, llama_batch_get_one(&t, 1)) != 0) {
                    fprintf(stderr, "decode failed at step %d\n", s); return 1;
                }
            }
        }
        tk += "]";

        std::string o = "{\"tokens\": [";
        for (size_t i = 0; i < toks.size(); ++i) o += (i ? ", " : "") + std::to_string(toks[i]);
        o += "], \"greedy\": [";
        for (size_t i = 0; i < greedy.size(); ++i) o += (i ? ", " : "") + std::to_string(greedy[i]);
        o += "], \"greedy_top2_gap\": [";
        for (size_t i = 0; i < gaps.size(); ++i) o += (i ? ", " : "") + fmt("%g", gaps[i]);
        o += "], \"greedy_logit_range\": [";
        for (size_t i = 0; i < ranges.size(); ++i) o += (i ? ", " : "") + fmt("%g", ranges[i]);
        o += "], \"topk\": " + tk + "}";
        pj += (ip ? ", " : "") + o;

        llama_free(ctx);
    }
    pj += "]";
    fclose(flog);

    std::string j = "{\"n_vocab\": " + std::to_string(n_vocab);
    j += std::string(", \"add_bos\": ") + (llama_vocab_get_add_bos(vocab) ? "true" : "false");
    j += ", \"model_desc\": " + json_str(desc);
    j += ", \"settings\": {\"backend\": \"CPU\", \"n_ctx\": 256, \"n_batch\": 256, \"n_ubatch\": 256, \"n_threads\": 1, "
         + std::string(defaults ? "\"type_k\": \"f16\", \"type_v\": \"f16\", \"flash_attn\": \"auto\", "
                    : "\"type_k\": \"f32\", \"type_v\": \"f32\", \"flash_attn\": false, ") + "\"tokenize_add_special\": true, "
         "\"tokenize_parse_special\": false, \"prompt_decoded_as_one_batch\": true, \"greedy_decoded_one_token_per_batch\": true}";
    j += ", \"system_info\": " + json_str(llama_print_system_info());
    j += ", \"prompts\": " + pj + "}\n";

    FILE * fj = fopen(argv[3], "w");
    if (!fj) { fprintf(stderr, "cannot write %s\n", argv[3]); return 1; }
    fputs(j.c_str(), fj);
    fclose(fj);

    llama_model_free(model);
    llama_backend_free();
    return 0;
}
