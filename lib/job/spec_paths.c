/* spec_paths.c - relative data paths made absolute before a spec leaves
 * the place where they mean something.
 *
 * A job file's own data.train / data.val are relative to the file's
 * folder; a `--set data.train=...` typed by a person is relative to the
 * current directory (issue 18).  So callers resolve the file's paths
 * against its folder first, apply the overrides, then resolve what is
 * still relative against the current directory.
 * Owns: rewriting those two keys (a string or a list of strings).
 * Never does: check that a path exists (the spec and the daemon do).
 */
#include "job/spec.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

json_t *td_spec_path_join(const char *base, const char *rel)
{
    size_t bl = strlen(base);
    while (bl > 1 && base[bl - 1] == '/')
        bl--;
    for (;;) { /* leading ./ and ../ (base has no symbolic link) */
        if (rel[0] == '.' && (rel[1] == '/' || !rel[1])) {
            rel += rel[1] ? 2 : 1;
        } else if (base[0] == '/' && rel[0] == '.' && rel[1] == '.' &&
                   (rel[2] == '/' || !rel[2])) {
            rel += rel[2] ? 3 : 2;
            while (bl > 1 && base[bl - 1] != '/')
                bl--;
            while (bl > 1 && base[bl - 1] == '/')
                bl--;
        } else {
            break;
        }
        while (rel[0] == '/')
            rel++;
    }
    if (!rel[0])
        return json_sprintf("%.*s", (int)bl, base);
    return json_sprintf("%.*s%s%s", (int)bl, base,
                        bl == 1 && base[0] == '/' ? "" : "/", rel);
}

int td_spec_absolute_paths(json_t *root, const char *base)
{
    static const char *keys[] = {"train", "val"};
    char cwd[PATH_MAX];
    json_t *data = json_object_get(root, "data");
    if (!base) {
        if (!getcwd(cwd, sizeof cwd))
            return -errno;
        base = cwd;
    }
    for (size_t i = 0; i < 2 && json_is_object(data); i++) {
        json_t *v = json_object_get(data, keys[i]);
        const char *s = json_string_value(v);
        if (s && s[0] && s[0] != '/') {
            json_t *a = td_spec_path_join(base, s);
            if (!a || json_object_set_new(data, keys[i], a))
                return -ENOMEM;
            continue; /* v was a string, and set_new has freed it */
        }
        size_t k;
        json_t *e;
        json_array_foreach(json_is_array(v) ? v : NULL, k, e) {
            s = json_string_value(e);
            if (!s || !s[0] || s[0] == '/')
                continue;
            json_t *a = td_spec_path_join(base, s);
            if (!a || json_array_set_new(v, k, a))
                return -ENOMEM;
        }
    }
    return 0;
}
