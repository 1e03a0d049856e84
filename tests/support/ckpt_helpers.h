/* ckpt_helpers.h - scratch directories and a small reference snapshot for
 * the checkpoint suites (header-only, static functions). */
#ifndef TD_TEST_CKPT_HELPERS_H
#define TD_TEST_CKPT_HELPERS_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/checkpoint.h"
#include "tdtest.h"

static inline void scratch_dir(char *out, size_t cap)
{
    snprintf(out, cap, "/tmp/td_ckpt_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(out));
}

static inline void rm_tree(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char p[4200];
    if (!d)
        return;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
    closedir(d);
    rmdir(dir);
}

static inline int count_files(const char *dir, const char *suffix)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    if (!d)
        return -1;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name), s = strlen(suffix);
        if (e->d_name[0] != '.' && l >= s &&
            strcmp(e->d_name + l - s, suffix) == 0)
            n++;
    }
    closedir(d);
    return n;
}

/* w: F32 [2,3] = i*0.5-1; step: I64 [] = step; bytes: U8 [5] = 7*i;
 * empty: F32 [0]. */
static inline void make_snapshot(td_ckpt_snapshot *s, int64_t step)
{
    void *p;
    ck_assert_int_eq(td_ckpt_snapshot_init(s, 1024, 8), 0);
    ck_assert_int_eq(td_ckpt_snapshot_add(s, "w", TD_DT_F32, 2,
                                          (int64_t[]){2, 3}, &p), 0);
    for (int i = 0; i < 6; i++)
        ((float *)p)[i] = (float)i * 0.5f - 1.0f;
    ck_assert_int_eq(td_ckpt_snapshot_add(s, "step", TD_DT_I64, 0, NULL, &p),
                     0);
    memcpy(p, &step, 8);
    ck_assert_int_eq(td_ckpt_snapshot_add(s, "bytes", TD_DT_U8, 1,
                                          (int64_t[]){5}, &p), 0);
    for (int i = 0; i < 5; i++)
        ((uint8_t *)p)[i] = (uint8_t)(7 * i);
    ck_assert_int_eq(td_ckpt_snapshot_add(s, "empty", TD_DT_F32, 1,
                                          (int64_t[]){0}, &p), 0);
    s->meta.spec_hash = UINT64_C(0xfedcba9876543210);
    s->meta.step = step;
    s->meta.epoch = 2;
    s->meta.sampler_pos = 1234;
    s->meta.seed = 42;
}

#endif
