/* cpu_bwdd.h - the CPU backend's backward data as a forward convolution,
 * what tests may see of it.
 *
 * Owns: reading back the flipped, channel-swapped bf16 weights a layer's
 * forward-as-backward-data convolution uses (cpu_bwdd.c), for tests.
 * Never does: anything a step needs (cpu_int.h declares that).
 */
#ifndef TD_BACKEND_CPU_BWDD_H
#define TD_BACKEND_CPU_BWDD_H

#include <stddef.h>

#include "backend/backend.h"

/* The weights layer `layer`'s backward data reads, as of the last
 * refresh (the start of the last train or eval step), converted by a
 * oneDNN reorder (not the weight map) to fp32 plain [ic][oc][kh][kw] into
 * out (n elements).  b must be a CPU backend.  -ENOENT: that layer's
 * backward data is not a forward convolution; -EINVAL: n is not its
 * weight count; TD_E_DEVICE: oneDNN failed (b->err says why). */
int td_cpu_bwdd_weights(td_backend *b, int layer, float *out, size_t n);

#endif
