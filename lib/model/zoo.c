/* zoo.c - where zoo models are found (see zoo.h). */
#include "model/zoo.h"

#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
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
        if (stat(out, &st) == 0)
            return;
    }
    /* Run from the build tree (not installed): the source tree's zoo. */
    ssize_t n = readlink("/proc/self/exe", tmp, sizeof tmp - 1);
    size_t blen = strlen(TD_BUILD_DIR);
    if (n > 0 && (size_t)n > blen && strncmp(tmp, TD_BUILD_DIR, blen) == 0 &&
        tmp[blen] == '/' && stat(TD_SOURCE_MODELS_DIR, &st) == 0) {
        snprintf(out, cap, "%s", TD_SOURCE_MODELS_DIR);
        return;
    }
    snprintf(out, cap, "%s", TD_MODELS_INSTALL_DIR);
}
