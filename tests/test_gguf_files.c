/* Damaged and hostile GGUF files: every one must be refused with a specific
 * message naming the problem, never a crash, hang or huge allocation.  The
 * files are built here from a small valid GGUF assembled byte by byte, so the
 * test knows every field's offset. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "t.h"

/* ---- a tiny byte builder ---- */

typedef struct {
    uint8_t *p;
    size_t n, cap;
} buf;

static void put(buf *b, const void *src, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void u32(buf *b, uint32_t v) { put(b, &v, 4); }
static void u64(buf *b, uint64_t v) { put(b, &v, 8); }
static void str(buf *b, const char *s) { u64(b, strlen(s)), put(b, s, strlen(s)); }
static void pad(buf *b, size_t align) { while (b->n % align) put(b, "", 1); }

/* Offsets of interesting fields in the valid file, filled by build(). */
typedef struct {
    size_t n_tensors, n_kv, first_key_len, arr_count, nested, t0_ndims, t0_type, t0_offset, t1_offset,
        t1_name, data, align_val;
} layout;

enum { ALIGN = 32 };

static buf build(layout *L, int variant)
{
    buf b = {0};
    put(&b, "GGUF", 4);
    u32(&b, 3);
    L->n_tensors = b.n;
    u64(&b, 2);
    L->n_kv = b.n;
    u64(&b, 5);
    /* kv 0: string */
    L->first_key_len = b.n;
    str(&b, "general.architecture"), u32(&b, GGUF_STRING), str(&b, "llama");
    /* kv 1: u32 */
    str(&b, "general.alignment"), u32(&b, GGUF_UINT32);
    L->align_val = b.n;
    u32(&b, ALIGN);
    /* kv 2: array of strings */
    str(&b, "tokenizer.ggml.tokens"), u32(&b, GGUF_ARRAY), u32(&b, GGUF_STRING);
    L->arr_count = b.n;
    u64(&b, 3), str(&b, "a"), str(&b, "b"), str(&b, "c");
    /* kv 3: nested array [[1,2],[3]] of int32 */
    str(&b, "test.nested"), u32(&b, GGUF_ARRAY);
    L->nested = b.n;
    u32(&b, GGUF_ARRAY), u64(&b, 2);
    u32(&b, GGUF_INT32), u64(&b, 2), u32(&b, 1), u32(&b, 2);
    u32(&b, GGUF_INT32), u64(&b, 1), u32(&b, 3);
    /* kv 4: the duplicate-key variant repeats key 0's name */
    str(&b, variant == 1 ? "general.architecture" : "test.f32"), u32(&b, GGUF_FLOAT32);
    float f = 1.5f;
    put(&b, &f, 4);
    /* tensor 0: f32 [8, 2] at 0 */
    str(&b, "a.weight");
    L->t0_ndims = b.n;
    u32(&b, 2), u64(&b, 8), u64(&b, 2);
    L->t0_type = b.n;
    u32(&b, GGML_TYPE_F32);
    L->t0_offset = b.n;
    u64(&b, 0);
    /* tensor 1: q8_0 [32, 1] after it */
    L->t1_name = b.n;
    str(&b, variant == 2 ? "a.weight" : "b.weight");
    u32(&b, 2), u64(&b, 32), u64(&b, 1), u32(&b, GGML_TYPE_Q8_0);
    L->t1_offset = b.n;
    u64(&b, 64);
    pad(&b, ALIGN);
    L->data = b.n;
    uint8_t zero[64 + 34] = {0};
    put(&b, zero, sizeof zero);
    return b;
}

static char tmpdir[256];

static const char *write_file(const char *name, const buf *b, size_t len)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    fwrite(b->p, 1, len, f);
    fclose(f);
    return path;
}

static void patch64(buf *b, size_t at, uint64_t v) { memcpy(b->p + at, &v, 8); }
static void patch32(buf *b, size_t at, uint32_t v) { memcpy(b->p + at, &v, 4); }

/* Opens the file in-process; returns the error message (empty on success). */
static const char *open_msg(const char *path)
{
    static sl_err err;
    gguf_file *g;
    err.msg[0] = 0;
    if (gguf_open(&g, path, &err) == 0) {
        gguf_close(g);
        return "";
    }
    return err.msg;
}

/* Runs `sluice inspect PATH`; returns its exit status (or 128+signal) and
 * captures stderr into ERRBUF. */
static int run_inspect(const char *path, char *errbuf, size_t cap)
{
    const char *bin = getenv("SLUICE_BIN");
    if (!bin) bin = "build/sluice";
    int fds[2];
    if (pipe(fds)) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 1);
        close(fds[0]);
        execl(bin, bin, "inspect", path, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    size_t n = 0;
    ssize_t r;
    while (n + 1 < cap && (r = read(fds[0], errbuf + n, cap - 1 - n)) > 0) n += (size_t)r;
    errbuf[n] = 0;
    char sink[256];
    while (read(fds[0], sink, sizeof sink) > 0) {}
    close(fds[0]);
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void expect_cli(const char *name, const buf *b, const char *want)
{
    t_begin(name);
    const char *path = write_file("case.gguf", b, b->n);
    const char *msg = open_msg(path);
    T_CHECK(strstr(msg, want) != NULL, "library message '%s' lacks '%s'", msg, want);
    T_CHECK(strstr(msg, "case.gguf") != NULL, "message does not name the file: %s", msg);
    char errbuf[2048];
    int rc = run_inspect(path, errbuf, sizeof errbuf);
    T_CHECK(rc == 1, "sluice inspect exit status %d (want 1), stderr: %s", rc, errbuf);
    T_CHECK(strstr(errbuf, want) != NULL, "stderr '%s' lacks '%s'", errbuf, want);
    t_end();
}

static void valid_file(void)
{
    layout L;
    buf b = build(&L, 0);
    t_begin("gguf hand-built valid file opens");
    const char *path = write_file("valid.gguf", &b, b.n);
    sl_err err;
    gguf_file *g;
    if (gguf_open(&g, path, &err)) {
        T_CHECK(0, "%s", err.msg);
    } else {
        const gguf_kv *kv = gguf_find(g, "test.nested");
        T_CHECK(kv && kv->v.type == GGUF_ARRAY && kv->v.arr.type == GGUF_ARRAY && kv->v.arr.n == 2, "nested");
        if (kv) {
            const gguf_value *inner = kv->v.arr.data;
            gguf_value x = gguf_arr_scalar(&inner[1], 0);
            T_CHECK(inner[0].arr.n == 2 && x.i == 3, "nested values");
        }
        const gguf_tensor *t = gguf_find_tensor(g, "b.weight");
        T_CHECK(t && t->nbytes == 34 && t->file_off == L.data + 64, "tensor b");
        float f = 0;
        T_CHECK(gguf_get_f32(g, "test.f32", &f, &err) == 1 && f == 1.5f, "f32");
        gguf_close(g);
    }
    t_end();
    free(b.p);
}

/* Every truncation point must give an error that says where. */
static void truncations(void)
{
    layout L;
    buf b = build(&L, 0);
    t_begin("gguf truncated at every byte");
    for (size_t len = 0; len < b.n; len++) {
        const char *path = write_file("trunc.gguf", &b, len);
        const char *msg = open_msg(path);
        T_CHECK(*msg, "truncated to %zu bytes but opened", len);
        T_CHECK(strstr(msg, "truncated") || strstr(msg, "past the end") || strstr(msg, "cannot fit") ||
                    strstr(msg, "exceeds") || strstr(msg, "not a GGUF"),
                "truncation at %zu: unspecific message '%s'", len, msg);
    }
    t_end();
    free(b.p);
}

static void named_cases(void)
{
    layout L;
    buf b;
#define CASE(label, mutate, want)                                                                                \
    do {                                                                                                         \
        b = build(&L, 0);                                                                                        \
        mutate;                                                                                                  \
        expect_cli("gguf bad: " label, &b, want);                                                                \
        free(b.p);                                                                                               \
    } while (0)
    CASE("bad magic", memcpy(b.p, "GGUX", 4), "not a GGUF file");
    CASE("version 1", patch32(&b, 4, 1), "version 1 is not supported");
    CASE("version 99", patch32(&b, 4, 99), "unsupported GGUF version 99");
    CASE("huge tensor count", patch64(&b, L.n_tensors, 1ull << 62), "tensor count");
    CASE("huge key count", patch64(&b, L.n_kv, 1ull << 62), "metadata key count");
    CASE("key length past EOF", patch64(&b, L.first_key_len, 1ull << 40), "string length");
    CASE("string array count", patch64(&b, L.arr_count, 1ull << 61), "cannot fit");
    CASE("nested array count", patch64(&b, L.nested + 4, 1ull << 60), "cannot fit");
    CASE("unknown array type", patch32(&b, L.nested, 77), "unknown array element type 77");
    CASE("tensor dims 0", patch32(&b, L.t0_ndims, 0), "0 dimensions");
    CASE("tensor dims 5", patch32(&b, L.t0_ndims, 5), "5 dimensions");
    CASE("unknown ggml type", patch32(&b, L.t0_type, 4), "unknown ggml type 4");
    CASE("tensor offset past EOF", patch64(&b, L.t1_offset, 1ull << 40), "runs past the end");
    CASE("misaligned tensor offset", patch64(&b, L.t1_offset, 65), "not a multiple of the alignment");
    CASE("overlapping tensors", patch64(&b, L.t1_offset, 32), "overlap");
    CASE("huge dimension", patch64(&b, L.t0_ndims + 4, 1ull << 62), "overflow");
    CASE("alignment not a power of two", patch32(&b, L.align_val, 24), "general.alignment");
#undef CASE
    b = build(&L, 1);
    expect_cli("gguf bad: duplicate key", &b, "duplicate metadata key 'general.architecture'");
    free(b.p);
    b = build(&L, 2);
    expect_cli("gguf bad: duplicate tensor", &b, "duplicate tensor name 'a.weight'");
    free(b.p);
}

/* A split model: NAME-00001-of-00002.gguf holds the metadata and one tensor,
 * part 2 the other; opening part 1 must present both. */
static buf split_part(int no, const char *tensor, uint8_t fill, int tensors_total)
{
    buf b = {0};
    put(&b, "GGUF", 4);
    u32(&b, 3), u64(&b, 1), u64(&b, no == 0 ? 4 : 1);
    if (no == 0) {
        str(&b, "general.architecture"), u32(&b, GGUF_STRING), str(&b, "llama");
        str(&b, "split.count"), u32(&b, GGUF_UINT16);
        uint16_t two = 2;
        put(&b, &two, 2);
        str(&b, "split.tensors.count"), u32(&b, GGUF_INT32), u32(&b, (uint32_t)tensors_total);
    }
    str(&b, "split.no"), u32(&b, GGUF_UINT16);
    uint16_t n16 = (uint16_t)no;
    put(&b, &n16, 2);
    str(&b, tensor), u32(&b, 1), u64(&b, 4), u32(&b, GGML_TYPE_F32), u64(&b, 0);
    pad(&b, ALIGN);
    uint8_t data[16];
    memset(data, fill, sizeof data);
    put(&b, data, sizeof data);
    return b;
}

static void split_model(void)
{
    t_begin("gguf split model opens as one");
    buf a = split_part(0, "x.weight", 0x11, 2), b = split_part(1, "y.weight", 0x22, 2);
    write_file("m-00002-of-00002.gguf", &b, b.n);
    char path[512];
    snprintf(path, sizeof path, "%s", write_file("m-00001-of-00002.gguf", &a, a.n));
    sl_err err;
    gguf_file *g;
    if (gguf_open(&g, path, &err)) {
        T_CHECK(0, "%s", err.msg);
    } else {
        const gguf_tensor *y = gguf_find_tensor(g, "y.weight");
        uint8_t got[16] = {0};
        T_CHECK(g->n_parts == 2 && g->n_tensors == 2 && y && y->file == 1, "parts/tensors");
        T_CHECK(y && gguf_read_tensor(g, y, 0, got, 16, &err) == 0 && got[0] == 0x22 && got[15] == 0x22,
                "data of part 2");
        gguf_close(g);
    }
    free(b.p);
    b = split_part(1, "x.weight", 0x22, 2); /* same tensor in both parts */
    write_file("m-00002-of-00002.gguf", &b, b.n);
    T_CHECK(strstr(open_msg(path), "more than one split part"), "duplicate across parts: %s", open_msg(path));
    free(b.p);
    unlink(write_file("m-00002-of-00002.gguf", &a, 0));
    T_CHECK(strstr(open_msg(path), "m-00002-of-00002.gguf: cannot open"), "missing part: %s", open_msg(path));
    free(a.p);
    t_end();
}

/* Random byte flips: any outcome but a crash or a hang is acceptable, and
 * ASan checks every access in `make test-asan`. */
static void fuzz(void)
{
    layout L;
    buf b = build(&L, 0);
    t_begin("gguf random corruption (2000 mutants) never crashes");
    uint64_t s = 0x9e3779b97f4a7c15ull;
    int opened = 0;
    for (int i = 0; i < 2000; i++) {
        buf m = {0};
        put(&m, b.p, b.n);
        for (int k = 0; k < 1 + i % 4; k++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            m.p[s % (L.data)] ^= (uint8_t)(s >> 32) | 1;
        }
        const char *path = write_file("fuzz.gguf", &m, m.n);
        opened += *open_msg(path) == 0;
        free(m.p);
    }
    T_CHECK(opened < 2000, "every mutant opened");
    t_end();
    free(b.p);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/sluice-gguf-bad-XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    valid_file();
    truncations();
    named_cases();
    split_model();
    fuzz();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", getenv("KEEP") ? "/nonexistent" : tmpdir);
    if (system(cmd)) {}
    return t_done();
}
