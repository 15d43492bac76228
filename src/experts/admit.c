#include "experts/admit.h"

#include <strings.h>

static const char *const NAMES[PF_ADMIT_N_MODES] = {"cost", "rank", "off"};

const char *pf_admit_name(pf_admit_mode m) { return (unsigned)m < PF_ADMIT_N_MODES ? NAMES[m] : "?"; }

int pf_admit_parse(const char *name)
{
    for (int i = 0; i < PF_ADMIT_N_MODES; i++)
        if (!strcasecmp(name, NAMES[i])) return i;
    return -1;
}

static double clamp01(double x) { return x < 0 ? 0 : x > 1 ? 1 : x; }

/* read / min(read, compute): how much more disk time a wrong guess costs
 * than a right one can save (1 while the compute hides a whole read). */
static double read_over_hidden(double read_s, double compute_s)
{
    if (read_s <= 0 || compute_s <= 0 || compute_s >= read_s) return 1;
    return read_s / compute_s;
}

bool pf_admit_cost(double p, double read_s, double compute_s, double busy)
{
    p = clamp01(p), busy = clamp01(busy);
    /* divided through by min(read, compute) > 0 */
    return p * (1 - busy) > (1 - p) * busy * read_over_hidden(read_s, compute_s);
}

double pf_admit_threshold(double read_s, double compute_s, double busy)
{
    busy = clamp01(busy);
    if (busy >= 1) return 1;
    /* p (1 - b) = (1 - p) b k  <=>  p = b k / (1 - b + b k) */
    double bk = busy * read_over_hidden(read_s, compute_s);
    return bk / (1 - busy + bk);
}

bool pf_admit_rank(double p, double busy) { return p >= (busy > 0.5 ? 0.5 : 0.25); }
