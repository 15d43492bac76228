/* What this binary was built from, for reports (bench's records, --version). */
#ifndef SLUICE_CLI_BUILD_INFO_H
#define SLUICE_CLI_BUILD_INFO_H

/* The git commit (short hash, "-dirty" with uncommitted changes) at build
 * time; "unknown" when built outside a git checkout. */
const char *cli_build_commit(void);

#endif
