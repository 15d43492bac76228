/* sluice public API.
 *
 * sluice runs Mixture-of-Experts language models from GGUF files that are
 * larger than RAM: the dense spine stays resident and routed experts stream
 * from SSD, with output bit-identical to an all-in-RAM run.  This header is
 * the narrow surface for embedding the engine; everything else is internal. */
#ifndef SLUICE_H
#define SLUICE_H

#define SLUICE_VERSION "0.1.0"

#endif
