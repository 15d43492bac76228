/* sluice serve: the OpenAI- and Anthropic-compatible HTTP server
 * (src/server).  Flags follow llama-server's names where they overlap. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cli_gen.h"
#include "server/server.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: sluice serve [-m MODEL.gguf] [--host 127.0.0.1] [--port 8080] [options]\n\n"
            "Serves the model over HTTP: OpenAI (/v1/chat/completions, /v1/completions, /v1/models),\n"
            "Anthropic (/v1/messages), /apply-template, /tokenize, /detokenize, /health, /metrics and a\n"
            "web chat at /.  One generation runs at a time; the others wait in a queue.\n\n"
            "  -m, --model FILE          GGUF model (default: the bundled models/tinymoe-q8_0.gguf)\n"
            "      --host ADDR           IPv4 address to listen on (default 127.0.0.1, loopback only)\n"
            "      --port N              port (default 8080; 0: any free port, printed)\n"
            "      --api-key KEY         require KEY (Authorization: Bearer KEY, or x-api-key)\n"
            "      --api-key-file FILE   the key is the first line of FILE\n"
            "      --alias NAME          the model name clients see (default: the model's general.name)\n"
            "  -c, --ctx-size N          context in tokens (default: min(training context, 4096); 512 for\n"
            "                            the bundled model)\n"
            "  -t, --threads N           threads (default: physical cores)\n"
            "  -b, --batch-size N        most tokens per layer-major pass (default 512)\n"
            "      --queue N             most requests waiting for the model (default 8; more get 429)\n"
            "      --max-body BYTES      largest request body (default 8M; larger get 413)\n"
            "      --timeout S           cancel a request S seconds after it arrived (default: none)\n"
            "      --kv-dir DIR          save finished conversations' contexts in DIR and continue them after\n"
            "                            a restart without their prefill\n"
            "      --kv-dir-size SIZE    total size of DIR's saved contexts (default 8G; oldest go first)\n"
            "      --chat-template NAME  a built-in template (chatml) instead of the model's\n"
            "      --chat-template-file FILE  a Jinja chat template instead of the model's\n"
            "      --draft FILE|ngram    speculative decoding (same output, faster when drafts hit)\n"
            "      --log-format text|json  access log lines on stderr (default text)\n\n%s",
            CLI_STREAM_HELP);
}

enum {
    O_HOST = CLI_OPT_FIRST_FREE, O_PORT, O_KEY, O_KEY_FILE, O_ALIAS, O_QUEUE, O_MAX_BODY, O_TIMEOUT, O_KV_DIR,
    O_KV_SIZE, O_TEMPLATE, O_TEMPLATE_FILE, O_DRAFT, O_LOG, O_READY
};

static const struct option LONGOPTS[] = {
    {"model", required_argument, 0, 'm'},      {"ctx-size", required_argument, 0, 'c'},
    {"threads", required_argument, 0, 't'},    {"batch-size", required_argument, 0, 'b'},
    {"host", required_argument, 0, O_HOST},    {"port", required_argument, 0, O_PORT},
    {"api-key", required_argument, 0, O_KEY},  {"api-key-file", required_argument, 0, O_KEY_FILE},
    {"alias", required_argument, 0, O_ALIAS},  {"queue", required_argument, 0, O_QUEUE},
    {"max-body", required_argument, 0, O_MAX_BODY}, {"timeout", required_argument, 0, O_TIMEOUT},
    {"kv-dir", required_argument, 0, O_KV_DIR}, {"kv-dir-size", required_argument, 0, O_KV_SIZE},
    {"chat-template", required_argument, 0, O_TEMPLATE},
    {"chat-template-file", required_argument, 0, O_TEMPLATE_FILE},
    {"draft", required_argument, 0, O_DRAFT},  {"log-format", required_argument, 0, O_LOG},
    {"ready-file", required_argument, 0, O_READY}, {"help", no_argument, 0, 'h'},
    CLI_STREAM_LONGOPTS,
    {0, 0, 0, 0},
};

/* The key file's first line, without its line break. */
static char *read_key(const char *path)
{
    size_t len = 0;
    char *k = cli_read_file(path, &len);
    if (!k) return NULL;
    k[strcspn(k, "\r\n")] = 0;
    if (!*k) {
        free(k);
        cli_fail("--api-key-file %s: the first line is empty", path);
        return NULL;
    }
    return k;
}

typedef struct {
    srv_opts o;
    engine_opts eo;
    char *key, *tmpl;
} serve_args;

static int parse(int argc, char **argv, serve_args *a)
{
    long v;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:c:t:b:h", LONGOPTS, NULL)) != -1) {
        int s = cli_stream_option(c, optarg, &a->eo);
        if (s < 0) return -1;
        if (s > 0) continue;
        switch (c) {
        case 'm': a->o.open.model = optarg; break;
        case 'c':
            if (cli_parse_int("-c", optarg, 1, 1 << 24, &v)) return -1;
            a->o.open.n_ctx = (int32_t)v;
            break;
        case 't':
            if (cli_parse_int("-t", optarg, 1, 1024, &v)) return -1;
            a->o.open.threads = (int)v;
            break;
        case 'b':
            if (cli_parse_int("-b", optarg, 1, 1 << 16, &v)) return -1;
            a->o.open.n_batch = (int32_t)v;
            break;
        case O_HOST: a->o.host = optarg; break;
        case O_PORT:
            if (cli_parse_int("--port", optarg, 0, 65535, &v)) return -1;
            a->o.port = (int)v;
            break;
        case O_KEY: a->o.api_key = optarg; break;
        case O_KEY_FILE:
            free(a->key);
            if (!(a->key = read_key(optarg))) return -1;
            a->o.api_key = a->key;
            break;
        case O_ALIAS: a->o.alias = optarg; break;
        case O_QUEUE:
            if (cli_parse_int("--queue", optarg, 0, 100000, &v)) return -1;
            a->o.queue = (size_t)v;
            break;
        case O_MAX_BODY: {
            int64_t b = cli_parse_size(optarg);
            if (b <= 0) return cli_fail("--max-body %s: not a size (e.g. 8M)", optarg), -1;
            a->o.max_body = (size_t)b;
            break;
        }
        case O_TIMEOUT: {
            float t;
            if (cli_parse_float("--timeout", optarg, &t)) return -1;
            if (t < 0) return cli_fail("--timeout must not be negative"), -1;
            a->o.timeout_s = t;
            break;
        }
        case O_KV_DIR: a->o.kv_dir = optarg; break;
        case O_KV_SIZE: {
            int64_t b = cli_parse_size(optarg);
            if (b <= 0) return cli_fail("--kv-dir-size %s: not a size (e.g. 8G)", optarg), -1;
            a->o.kv_dir_bytes = (uint64_t)b;
            break;
        }
        case O_TEMPLATE: a->o.open.chat_template = optarg; break;
        case O_TEMPLATE_FILE: {
            size_t len;
            free(a->tmpl);
            if (!(a->tmpl = cli_read_file(optarg, &len))) return -1;
            a->o.open.chat_template = a->tmpl;
            break;
        }
        case O_DRAFT: a->o.open.draft = optarg; break;
        case O_LOG:
            if (strcmp(optarg, "json") && strcmp(optarg, "text"))
                return cli_fail("--log-format must be text or json, not %s", optarg), -1;
            a->o.log_json = !strcmp(optarg, "json");
            break;
        case O_READY: a->o.ready_file = optarg; break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); return -2;
        }
    }
    if (optind < argc) return cli_fail("unexpected argument '%s' (see sluice serve --help)", argv[optind]), -1;
    return 0;
}

int cmd_serve(int argc, char **argv)
{
    serve_args a = {.o = srv_opts_default()};
    int rc = parse(argc, argv, &a);
    if (rc) {
        free(a.key), free(a.tmpl);
        return rc == -2 ? 2 : 1;
    }
    sluice_options *so = &a.o.open;
    if (!so->model) so->model = cli_default_model();
    if (!so->model) return cli_fail("no model given (-m FILE) and the bundled models/tinymoe-q8_0.gguf was not found");
    if (so->n_ctx <= 0 && cli_is_bundled(so->model)) so->n_ctx = CLI_BUNDLED_CTX;
    so->mem_bytes = a.eo.mem;
    so->pack = a.eo.pack;
    so->pin_bytes = a.eo.pin;
    so->heat_file = a.eo.heat_file;
    so->no_heat = a.eo.no_heat;
    if (a.eo.io_set) so->io = store_io_name(a.eo.io);
    if (a.eo.prefetch_set) so->prefetch = sl_prefetch_mode_name(a.eo.prefetch);
    if (a.eo.kv_mode == SL_KV_F32) so->kv_type = "f32";
    sl_err e;
    rc = srv_run(&a.o, &e);
    free(a.key);
    free(a.tmpl);
    if (rc) return cli_fail("serve: %s", e.msg);
    return 0;
}
