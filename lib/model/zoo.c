/* zoo.c - where zoo models are found (see zoo.h). */
#include "model/zoo.h"

#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "td_config.h"

void td_models_dir(const char *job, char *out, size_t cap)
{
    const char *env = getenv("TD_MODELS_DIR");
    char tmp[4096];
    struct stat st;
    if (env && *env) {
        snprintf(out, cap, "%s", env);
        return;
    }
    out[0] = '\0';
    if (job) {
        snprintf(tmp, sizeof tmp, "%s", job);
        snprintf(out, cap, "%s/../models", dirname(tmp));
    }
    if (!job || stat(out, &st) != 0)
        snprintf(out, cap, "%s", TD_MODELS_INSTALL_DIR);
}
