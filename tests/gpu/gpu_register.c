/* gpu_register.c - linked into every GPU test and benchmark: plugs the
 * CUDA backend into libtraind before main() runs, as traind's main() does
 * (td_cuda_register).  In a build without CUDA it does nothing, and those
 * programs skip with the reason. */
#include "td_config.h"

#if TD_HAVE_CUDA
#include "backend/cuda/backend_cuda.h"

__attribute__((constructor)) static void td__gpu_tests_register(void)
{
    td_cuda_register();
}
#else
/* ISO C wants at least one declaration in a translation unit. */
typedef int td__gpu_register_unused;
#endif
