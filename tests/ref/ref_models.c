/* ref_models.c - the backend suites' models by name (see ref_models.h). */
#include "ref_models.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

td_model *ref_load_model(const char *name, td_shape in, int classes)
{
    char path[4096], err[256] = "";
    const char *root = getenv("TD_SOURCE_ROOT");
    snprintf(path, sizeof path, "%s/config/models/%s.json", root ? root : ".",
             name);
    if (access(path, R_OK) != 0)
        snprintf(path, sizeof path, "%s/tests/data/%s.json",
                 root ? root : ".", name);
    td_model *m = NULL;
    int rc = td_model_load(NULL, path, in, classes, &m, err, sizeof err);
    ck_assert_msg(rc == 0, "%s (%s): %s", name, path, err);
    return m;
}
