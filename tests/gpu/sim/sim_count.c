/* sim_count.c - the simulated device's launches counted by kernel name.
 *
 * Owns: td_sim_kernel_runs (sim.h): how many times each kernel ran, by
 * the name TD_LAUNCH gives it (the kernel's source name, template
 * arguments included: "to_krsc_k<T>"), an eager launch and each replay
 * of a captured one alike, so a test can say which kernels a step
 * launches (issue 15: the 16-bit filters' rewrite gone from the step).
 * Never does: reset (counts are the whole process's, as the other
 * process-wide counters of sim.h: tests take differences), or count
 * library calls (cuBLAS, cuDNN: their own counters).
 */
#include <string.h>

#include "sim_int.h"

#define TD__SIM_KNAMES 256 /* distinct kernel names: the project has ~40 */

static struct {
    const char *name; /* TD_LAUNCH's string literal: static storage */
    long runs;
} td__knames[TD__SIM_KNAMES];
static int td__nknames;

void td__sim_count_kernel(const char *name)
{
    for (int i = 0; i < td__nknames; i++)
        if (td__knames[i].name == name || !strcmp(td__knames[i].name, name)) {
            td__knames[i].runs++;
            return;
        }
    if (td__nknames < TD__SIM_KNAMES) {
        td__knames[td__nknames].name = name;
        td__knames[td__nknames++].runs = 1;
    }
}

long td_sim_kernel_runs(const char *prefix)
{
    size_t k = strlen(prefix);
    long n = 0;
    td__sim_lock();
    for (int i = 0; i < td__nknames; i++)
        if (!strncmp(td__knames[i].name, prefix, k))
            n += td__knames[i].runs;
    td__sim_unlock();
    return n;
}
