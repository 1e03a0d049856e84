/* backend.c - picks a backend implementation by name (see backend.h). */
#include "backend.h"

#include <stdio.h>
#include <string.h>

#include "error.h"
#include "td_config.h"

int td_backend_create(const char *kind, const td_model *model,
                      const td_backend_config *cfg, td_backend **out,
                      char *err, size_t errcap)
{
    *out = NULL;
    if (strcmp(kind, "cpu") == 0)
        return td_backend_cpu_create(model, cfg, out, err, errcap);
    if (strncmp(kind, "cuda", 4) == 0) {
        snprintf(err, errcap, "device %s: the CUDA backend is not written "
                 "yet", kind);
        return TD_E_NOTSUP;
    }
    snprintf(err, errcap, "device: unknown backend \"%s\"", kind);
    return -EINVAL;
}
