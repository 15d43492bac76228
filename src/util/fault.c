/* Test-only fault injection (util/fault.h).  Empty in a release build. */
#include "util/fault.h"

#ifdef SLUICE_TEST_FAULTS

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static const char *const OP_NAME[SL_FAULT_N_OPS] = {"read", "write", "fsync", "rename", "uring"};

/* The test build's one mutable global (fault.h says why). */
static struct {
    atomic_long count[SL_FAULT_N_OPS];
    atomic_int op;    /* armed operation, or -1 */
    atomic_long nth;  /* 0: disarmed */
    atomic_int kind;  /* errno, or SL_FAULT_SHORT */
    atomic_int fired;
} F = {.op = -1};

static pthread_once_t env_once = PTHREAD_ONCE_INIT;

static const struct {
    const char *name;
    int code;
} KINDS[] = {{"EIO", EIO},       {"EINTR", EINTR},   {"EAGAIN", EAGAIN}, {"ENOSPC", ENOSPC},
             {"EDQUOT", EDQUOT}, {"ENOMEM", ENOMEM}, {"EBADF", EBADF},   {"short", SL_FAULT_SHORT}};

const char *sl_fault_op_name(sl_fault_op op) { return op < SL_FAULT_N_OPS ? OP_NAME[op] : "?"; }

int sl_fault_op_parse(const char *name)
{
    for (int i = 0; i < SL_FAULT_N_OPS; i++)
        if (!strcmp(name, OP_NAME[i])) return i;
    return -1;
}

/* SLUICE_FAULT=OP:N:KIND; a malformed value arms nothing. */
static void arm_from_env(void)
{
    const char *v = getenv("SLUICE_FAULT");
    if (!v) return;
    char op[16], kind[16];
    long n;
    if (sscanf(v, "%15[a-z]:%ld:%15[A-Za-z]", op, &n, kind) != 3 || n < 1) return;
    int o = sl_fault_op_parse(op);
    for (size_t i = 0; o >= 0 && i < sizeof KINDS / sizeof *KINDS; i++)
        if (!strcmp(kind, KINDS[i].name)) {
            atomic_store(&F.kind, KINDS[i].code);
            atomic_store(&F.nth, n);
            atomic_store(&F.op, o);
        }
}

void sl_fault_arm(sl_fault_op op, long n, int kind)
{
    pthread_once(&env_once, arm_from_env); /* an explicit arm wins over the environment */
    atomic_store(&F.op, -1);
    for (int i = 0; i < SL_FAULT_N_OPS; i++) atomic_store(&F.count[i], 0);
    atomic_store(&F.fired, 0);
    atomic_store(&F.kind, kind);
    atomic_store(&F.nth, n);
    if (n > 0) atomic_store(&F.op, (int)op);
}

long sl_fault_count(sl_fault_op op) { return atomic_load(&F.count[op]); }

int sl_fault_fired(void) { return atomic_load(&F.fired); }

int sl_fault_hit(sl_fault_op op, size_t *len)
{
    pthread_once(&env_once, arm_from_env);
    long k = atomic_fetch_add(&F.count[op], 1) + 1;
    if (atomic_load(&F.op) != (int)op || k != atomic_load(&F.nth)) return 0;
    int kind = atomic_load(&F.kind);
    if (kind != SL_FAULT_SHORT) {
        atomic_store(&F.fired, 1);
        return kind;
    }
    size_t half = (*len / 2) & ~(size_t)4095;
    if (half) *len = half, atomic_store(&F.fired, 1);
    return 0;
}

#endif
