#include "experts/sched.h"

#include <stdlib.h>

int sched_init(drive_sched *s, int n_drives, sl_err *err)
{
    *s = (drive_sched){.n = n_drives, .prior = 1e9, .window = 4u << 20, .alpha = 0.25};
    s->d = calloc((size_t)(n_drives > 0 ? n_drives : 1), sizeof *s->d);
    return s->d ? 0 : sl_errf(err, "out of memory");
}

void sched_free(drive_sched *s)
{
    free(s->d);
    s->d = NULL;
}

double sched_rate(const drive_sched *s, int drive)
{
    if (s->d[drive].samples) return s->d[drive].rate;
    double sum = 0;
    int n = 0;
    for (int i = 0; i < s->n; i++)
        if (s->d[i].samples) sum += s->d[i].rate, n++;
    return n ? sum / n : s->prior;
}

int sched_pick(const drive_sched *s, const uint32_t *cand, int n, uint64_t len)
{
    int best = -1;
    double best_t = 0;
    for (int i = 0; i < n; i++) {
        const sched_drive *d = &s->d[cand[i]];
        double t = (double)(d->inflight + len) / sched_rate(s, (int)cand[i]);
        if (best < 0 || t < best_t) best = (int)cand[i], best_t = t;
    }
    return best;
}

void sched_submit(drive_sched *s, int drive, uint64_t len)
{
    sched_drive *d = &s->d[drive];
    d->inflight += len;
    d->bytes += len;
    d->reads++;
}

void sched_drop(drive_sched *s, int drive, uint64_t len)
{
    sched_drive *d = &s->d[drive];
    d->inflight = d->inflight > len ? d->inflight - len : 0;
}

/* A window closes once it holds `window` bytes and 2 ms of busy time; the
 * rate is the ratio of exponentially decayed sums of bytes and busy time.
 * Sums, not an average of per-window ratios: completions are reaped in
 * bursts (many land while the caller computes), so one window can get a
 * burst's bytes with almost no busy time and the previous one the wait;
 * their ratios swing wildly, their sums do not. */
void sched_complete(drive_sched *s, int drive, uint64_t len, double busy_total)
{
    sched_drive *d = &s->d[drive];
    if (busy_total > d->busy_total) d->busy_s += busy_total - d->busy_total, d->busy_total = busy_total;
    sched_drop(s, drive, len); /* no longer in flight */
    d->window_bytes += len;
    if (d->window_bytes < s->window || d->busy_s < 2e-3) return;
    double keep = d->samples ? 1 - s->alpha : 0;
    d->sum_bytes = d->sum_bytes * keep + (double)d->window_bytes;
    d->sum_busy = d->sum_busy * keep + d->busy_s;
    d->rate = d->sum_bytes / d->sum_busy;
    d->samples++;
    d->window_bytes = 0;
    d->busy_s = 0;
}
