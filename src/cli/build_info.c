#include "cli/build_info.h"

/* Written by the Makefile, rewritten only when the commit changes, so a
 * new commit relinks the binary without recompiling the rest. */
#include "sluice_commit.h"

const char *cli_build_commit(void) { return SLUICE_COMMIT; }
