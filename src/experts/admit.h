/* Prefetch admission: whether a guess of the next layer's experts is worth
 * a read, given how likely it is to be used and how busy the disk is
 * (docs/PREFETCH.md, "Prefetch that pays").  Pure functions, so the rule's
 * decisions can be tested without a disk. */
#ifndef SLUICE_ADMIT_H
#define SLUICE_ADMIT_H

#include <stdbool.h>

/* cost: the expected-saving rule below (default); rank: a guess's rank
 * precision against a fixed bar (1/2 when the disk is busy more than half
 * the time, else 1/4: the rule before this one); off: every guess the
 * cache can place is read. */
typedef enum { PF_ADMIT_COST = 0, PF_ADMIT_RANK = 1, PF_ADMIT_OFF = 2 } pf_admit_mode;
enum { PF_ADMIT_N_MODES = 3 };

const char *pf_admit_name(pf_admit_mode m);
int pf_admit_parse(const char *name); /* -1 if unknown */

/* The cost rule.  P: probability the guess is used; READ_S: the disk time
 * one expert's read takes; COMPUTE_S: the compute a read started now can
 * hide behind (one layer's); BUSY: share of time the disk is busy with
 * reads the tokens need.  Read iff
 *     p * min(read, compute) * (1 - busy)  >  (1 - p) * read * busy
 * (left: the stall a right guess saves, if it finds idle disk time; right:
 * the demand time a wrong guess's bytes take, if the disk is the limit).
 * READ_S or COMPUTE_S <= 0 (not measured yet): taken as equal. */
bool pf_admit_cost(double p, double read_s, double compute_s, double busy);

/* The smallest P the cost rule admits at these figures (1 when none). */
double pf_admit_threshold(double read_s, double compute_s, double busy);

/* The rank rule (PF_ADMIT_RANK). */
bool pf_admit_rank(double p, double busy);

#endif
