/* fuzz_settings.c - traind.conf as the daemon reads it at start and on
 * SIGHUP (daemon/settings.c).
 *
 * Input: the file's bytes, read through td_settings_load_file.  Whatever
 * it says, the settings that come out must each still pass the table's
 * own check (reading them back through td_settings_set), and a refusal
 * must name the file and a line.
 */
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "fuzz.h"
#include "settings.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64], err[1024] = "", e2[512];
    int fd = td_fuzz_memfile(data, size, path, sizeof path);
    json_t *set = td_settings_defaults();
    TD_FUZZ_CHECK(set != NULL);
    int rc = td_settings_load_file(set, path, err, sizeof err);
    close(fd);
    if (rc) {
        TD_FUZZ_CHECK(rc < 0);
        TD_FUZZ_CHECK(strncmp(err, path, strlen(path)) == 0);
    }
    /* every value held is one the table accepts */
    json_t *copy = json_object();
    TD_FUZZ_CHECK(copy != NULL);
    for (const td_setting_def *d = td_setting_defs; d->key; d++) {
        json_t *v = json_object_get(set, d->key);
        TD_FUZZ_CHECK(v != NULL);
        TD_FUZZ_CHECK(td_settings_set(copy, d->key, v, NULL, e2, sizeof e2) ==
                      0);
    }
    json_decref(copy);
    /* and no key the table does not know */
    const char *key;
    json_t *v;
    json_object_foreach(set, key, v)
        TD_FUZZ_CHECK(td_setting_find(key) != NULL);
    json_decref(set);
    return 0;
}
