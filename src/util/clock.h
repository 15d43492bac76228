/* The one clock every timing figure is read from. */
#ifndef SLUICE_CLOCK_H
#define SLUICE_CLOCK_H

/* Seconds on CLOCK_MONOTONIC: immune to wall-clock steps, so differences
 * are durations. */
double sl_now(void);

#endif
