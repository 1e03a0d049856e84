/* test_checkpoint.c - safetensors checkpoints: the file layout, round
 * trip, validation of hand-made bad headers, every truncation and bit flip,
 * keep-K pruning, newest-valid fallback, and failed writes (injected and
 * real ENOSPC, a path that cannot be created) that leave older
 * checkpoints intact. */
#define _GNU_SOURCE /* unshare */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "base/error.h"
#include "ckpt_helpers.h"

static uint8_t *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*n + 1);
    ck_assert_uint_eq(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}

static void spit(const char *path, const void *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(b, 1, n, f), n);
    fclose(f);
}

/* Writes a file with the given header text and data bytes. */
static void write_raw(const char *path, const char *hdr, const void *data,
                      size_t dlen)
{
    size_t h = strlen(hdr);
    uint8_t *b = malloc(8 + h + dlen);
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)((uint64_t)h >> (8 * i));
    memcpy(b + 8, hdr, h);
    memcpy(b + 8 + h, data, dlen);
    spit(path, b, 8 + h + dlen);
    free(b);
}

START_TEST(test_roundtrip)
{
    char dir[64], path[4096], err[512];
    td_ckpt_snapshot s;
    td_ckpt_file *f;
    scratch_dir(dir, sizeof dir);
    make_snapshot(&s, 500);
    ck_assert_int_eq(td_ckpt_write(dir, &s, 0, NULL, path, sizeof path, err,
                                   sizeof err), 0);
    ck_assert_ptr_nonnull(strstr(path, "/ckpt-000000000500.safetensors"));
    ck_assert_int_eq(td_ckpt_open(path, &f, err, sizeof err), 0);
    const td_ckpt_meta *m = td_ckpt_file_meta(f);
    ck_assert_uint_eq(m->spec_hash, UINT64_C(0xfedcba9876543210));
    ck_assert_int_eq(m->step, 500);
    ck_assert_int_eq(m->epoch, 2);
    ck_assert_int_eq(m->sampler_pos, 1234);
    ck_assert_uint_eq(m->seed, 42);
    ck_assert_str_eq(td_ckpt_file_meta_str(f, "spec_hash"),
                     "fedcba9876543210");
    ck_assert_str_eq(td_ckpt_file_meta_str(f, "traind.format"), "2");
    ck_assert_int_eq(td_ckpt_file_count(f), 4);
    const td_ckpt_tensor *t = td_ckpt_file_find(f, "w");
    ck_assert_int_eq(t->dtype, TD_DT_F32);
    ck_assert_int_eq(t->ndim, 2);
    ck_assert_int_eq(t->shape[0], 2);
    ck_assert_int_eq(t->shape[1], 3);
    float w[6];
    int64_t step;
    uint8_t bytes[5];
    ck_assert_int_eq(td_ckpt_file_read(f, "w", TD_DT_F32, w, sizeof w, err,
                                       sizeof err), 0);
    for (int i = 0; i < 6; i++)
        ck_assert_float_eq(w[i], (float)i * 0.5f - 1.0f);
    ck_assert_int_eq(td_ckpt_file_read(f, "step", TD_DT_I64, &step, 8, err,
                                       sizeof err), 0);
    ck_assert_int_eq(step, 500);
    ck_assert_int_eq(td_ckpt_file_read(f, "bytes", TD_DT_U8, bytes, 5, err,
                                       sizeof err), 0);
    ck_assert_uint_eq(bytes[4], 28);
    ck_assert_int_eq(td_ckpt_file_find(f, "empty")->nbytes, 0);
    td_ckpt_close(f);
    td_ckpt_snapshot_destroy(&s);
    rm_tree(dir);
}
END_TEST

/* A file cut short once open (an init file overwritten in place as its
 * job starts): what was opened reads as it was.  It was mapped, and the
 * first read past the new end raised SIGBUS (the daemon died with it). */
START_TEST(test_cut_short_after_open)
{
    char dir[64], path[4096], err[512];
    td_ckpt_snapshot s;
    td_ckpt_file *f;
    scratch_dir(dir, sizeof dir);
    make_snapshot(&s, 500);
    ck_assert_int_eq(td_ckpt_write(dir, &s, 0, NULL, path, sizeof path, err,
                                   sizeof err), 0);
    ck_assert_int_eq(td_ckpt_open(path, &f, err, sizeof err), 0);
    ck_assert_int_eq(truncate(path, 0), 0);
    float w[6];
    ck_assert_int_eq(td_ckpt_file_read(f, "w", TD_DT_F32, w, sizeof w, err,
                                       sizeof err), 0);
    for (int i = 0; i < 6; i++)
        ck_assert_float_eq(w[i], (float)i * 0.5f - 1.0f);
    td_ckpt_close(f);
    td_ckpt_snapshot_destroy(&s);
    rm_tree(dir);
}
END_TEST

/* td_st_write: a plain weights file with the caller's metadata, which
 * td_st_open reads and td_ckpt_open refuses (nothing to resume from);
 * td_st_open takes files without __metadata__ (PyTorch's writer) and
 * still checks the structure. */
START_TEST(test_plain_safetensors)
{
    char dir[64], path[4200], err[512];
    td_ckpt_snapshot s;
    td_ckpt_file *f;
    scratch_dir(dir, sizeof dir);
    make_snapshot(&s, 7);
    json_t *extra = json_pack("{s:s}", "traind.model", "{\"layers\":[]}");
    s.extra_meta = extra;
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    ck_assert_int_eq(td_st_write(path, &s, err, sizeof err), 0);
    ck_assert_int_eq(td_ckpt_open(path, &f, err, sizeof err), TD_E_CORRUPT);
    ck_assert_msg(strstr(err, "traind.format"), "%s", err);
    ck_assert_int_eq(td_st_open(path, &f, err, sizeof err), 0);
    ck_assert_str_eq(td_ckpt_file_meta_str(f, "traind.model"),
                     "{\"layers\":[]}");
    ck_assert_str_eq(td_ckpt_file_meta_str(f, "format"), "pt");
    ck_assert_ptr_null(td_ckpt_file_meta_str(f, "step"));
    ck_assert_int_eq(td_ckpt_file_meta(f)->step, 0);
    float w[6];
    ck_assert_int_eq(td_ckpt_file_read(f, "w", TD_DT_F32, w, sizeof w, err,
                                       sizeof err), 0);
    ck_assert_float_eq(w[5], 1.5f);
    td_ckpt_close(f);

    uint8_t data[12] = {0};
    write_raw(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],"
              "\"data_offsets\":[0,12]}}", data, sizeof data);
    ck_assert_int_eq(td_st_open(path, &f, err, sizeof err), 0);
    ck_assert_int_eq(td_ckpt_file_count(f), 1);
    td_ckpt_close(f);
    write_raw(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],"
              "\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\","
              "\"shape\":[2],\"data_offsets\":[4,12]}}", data, sizeof data);
    ck_assert_int_eq(td_st_open(path, &f, err, sizeof err), TD_E_CORRUPT);
    ck_assert_msg(strstr(err, "overlaps"), "%s", err);
    json_decref(extra);
    td_ckpt_snapshot_destroy(&s);
    rm_tree(dir);
}
END_TEST

START_TEST(test_file_layout)
{
    char dir[64], path[4096], err[512];
    td_ckpt_snapshot s;
    size_t n;
    scratch_dir(dir, sizeof dir);
    make_snapshot(&s, 7);
    ck_assert_int_eq(td_ckpt_write(dir, &s, 0, NULL, path, sizeof path, err,
                                   sizeof err), 0);
    uint8_t *b = slurp(path, &n);
    uint64_t h = 0;
    for (int i = 0; i < 8; i++)
        h |= (uint64_t)b[i] << (8 * i);
    ck_assert_uint_eq((8 + h) % 8, 0);          /* padded to 8 */
    ck_assert_uint_eq(n, 8 + h + s.used);        /* then exactly the data */
    ck_assert_int_eq(b[8], '{');
    ck_assert_int_eq(b[8 + h - 1] == ' ' || b[8 + h - 1] == '}', 1);
    ck_assert_mem_eq(b + 8 + h, s.data, s.used); /* raw little-endian */
    ck_assert_int_eq(count_files(dir, ".tmp"), 0);
    free(b);
    td_ckpt_snapshot_destroy(&s);
    rm_tree(dir);
}
END_TEST

START_TEST(test_snapshot_add_errors)
{
    td_ckpt_snapshot s;
    void *p;
    char longname[200];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    ck_assert_int_eq(td_ckpt_snapshot_init(&s, 64, 2), 0);
    ck_assert_int_eq(td_ckpt_snapshot_add(&s, "a", TD_DT_F32, 1,
                                          (int64_t[]){4}, &p), 0);
    ck_assert_int_eq(td_ckpt_snapshot_add(&s, "a", TD_DT_F32, 1,
                                          (int64_t[]){1}, &p), -EINVAL);
    ck_assert_int_eq(td_ckpt_snapshot_add(&s, "__metadata__", TD_DT_F32, 0,
                                          NULL, &p), -EINVAL);
    ck_assert_int_eq(td_ckpt_snapshot_add(&s, longname, TD_DT_F32, 0, NULL,
                                          &p), -ENAMETOOLONG);
    ck_assert_int_eq(td_ckpt_snapshot_add(&s, "neg", TD_DT_F32, 1,
                                          (int64_t[]){-1}, &p), -EINVAL);
    ck_assert_int_eq(td_ckpt_snapshot_add(&s, "big", TD_DT_F64, 1,
                                          (int64_t[]){7}, &p), -ENOSPC);
    ck_assert_int_eq(td_ckpt_snapshot_add(&s, "huge", TD_DT_F64, 2,
                                          (int64_t[]){INT64_MAX, 4}, &p),
                     -EINVAL);
    ck_assert_int_eq(td_ckpt_snapshot_add(&s, "b", TD_DT_U8, 1,
                                          (int64_t[]){48}, &p), 0);
    ck_assert_int_eq(td_ckpt_snapshot_add(&s, "c", TD_DT_U8, 0, NULL, &p),
                     -ENOSPC); /* out of tensor slots */
    ck_assert_uint_eq(s.used, 64);
    td_ckpt_snapshot_destroy(&s);
}
END_TEST

START_TEST(test_read_errors)
{
    char dir[64], path[4096], err[512];
    td_ckpt_snapshot s;
    td_ckpt_file *f;
    float w[6];
    scratch_dir(dir, sizeof dir);
    make_snapshot(&s, 1);
    ck_assert_int_eq(td_ckpt_write(dir, &s, 0, NULL, path, sizeof path, err,
                                   sizeof err), 0);
    ck_assert_int_eq(td_ckpt_open(path, &f, err, sizeof err), 0);
    ck_assert_int_eq(td_ckpt_file_read(f, "nope", TD_DT_F32, w, sizeof w,
                                       err, sizeof err), -ENOENT);
    ck_assert_str_eq(err, "tensor \"nope\" is not in the checkpoint");
    ck_assert_int_eq(td_ckpt_file_read(f, "w", TD_DT_F64, w, sizeof w, err,
                                       sizeof err), -EINVAL);
    ck_assert_str_eq(err, "tensor \"w\" is F32, 24 bytes; expected F64, "
                          "24 bytes");
    ck_assert_int_eq(td_ckpt_file_read(f, "w", TD_DT_F32, w, 20, err,
                                       sizeof err), -EINVAL);
    td_ckpt_close(f);
    ck_assert_int_eq(td_ckpt_open("/nonexistent/x.safetensors", &f, err,
                                  sizeof err), -ENOENT);
    ck_assert_ptr_null(f);
    td_ckpt_snapshot_destroy(&s);
    rm_tree(dir);
}
END_TEST

/* Hand-made headers, each with one defect, and the reason reported. */
START_TEST(test_bad_headers)
{
    static const struct {
        const char *hdr;
        const char *why;
    } cases[] = {
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
         "overlaps the previous one"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
         "a hole in the data"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
         "outside the data region"},
        {"{\"a\":{\"dtype\":\"F33\",\"shape\":[3],\"data_offsets\":[0,12]}}",
         "unknown dtype \"F33\""},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,12]}}",
         "12 bytes but F32 x shape needs 8"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-3],\"data_offsets\":[0,12]}}",
         "bad shape"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]}}",
         "no __metadata__"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]},"
         "\"__metadata__\":{\"traind.format\":\"9\"}}",
         "format version 9"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12],"
         "\"x\":1}}",
         "malformed header entry"},
        {"[1,2]", "header is not a JSON object"},
        {"{\"a\":", "header is not a JSON object"},
    };
    char dir[64], path[4200], err[512];
    uint8_t data[12] = {0};
    td_ckpt_file *f;
    scratch_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/bad.safetensors", dir);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_raw(path, cases[i].hdr, data, sizeof data);
        ck_assert_int_eq(td_ckpt_open(path, &f, err, sizeof err),
                         TD_E_CORRUPT);
        ck_assert_msg(strstr(err, cases[i].why) && strstr(err, path),
                      "case %zu: got \"%s\"", i, err);
    }
    rm_tree(dir);
}
END_TEST

START_TEST(test_truncations)
{
    char dir[64], path[4096], cut[4200], err[512];
    td_ckpt_snapshot s;
    td_ckpt_file *f;
    size_t n;
    scratch_dir(dir, sizeof dir);
    make_snapshot(&s, 3);
    ck_assert_int_eq(td_ckpt_write(dir, &s, 0, NULL, path, sizeof path, err,
                                   sizeof err), 0);
    uint8_t *b = slurp(path, &n);
    snprintf(cut, sizeof cut, "%s/cut.safetensors", dir);
    for (size_t len = 0; len < n; len++) {
        spit(cut, b, len);
        err[0] = '\0';
        int r = td_ckpt_open(cut, &f, err, sizeof err);
        ck_assert_msg(r == TD_E_CORRUPT || r == TD_E_CRC,
                      "truncated to %zu: %d %s", len, r, err);
        ck_assert_ptr_null(f);
        ck_assert_ptr_nonnull(strstr(err, cut));
    }
    free(b);
    td_ckpt_snapshot_destroy(&s);
    rm_tree(dir);
}
END_TEST

/* Every single-bit flip: never a crash; a flip in the length prefix or the
 * data is always caught; one in the header is caught unless it leaves a
 * well-formed header (a changed name or metadata letter). */
START_TEST(test_bit_flips)
{
    char dir[64], path[4096], err[512];
    td_ckpt_snapshot s;
    td_ckpt_file *f;
    size_t n;
    int accepted = 0;
    scratch_dir(dir, sizeof dir);
    make_snapshot(&s, 3);
    ck_assert_int_eq(td_ckpt_write(dir, &s, 0, NULL, path, sizeof path, err,
                                   sizeof err), 0);
    uint8_t *b = slurp(path, &n);
    size_t data_at = n - s.used;
    for (size_t i = 0; i < n; i++) {
        b[i] ^= (uint8_t)(1u << (i % 8));
        spit(path, b, n);
        int r = td_ckpt_open(path, &f, err, sizeof err);
        b[i] ^= (uint8_t)(1u << (i % 8));
        if (r == 0) {
            ck_assert_msg(i >= 8 && i < data_at, "flip at %zu accepted", i);
            accepted++;
            td_ckpt_close(f);
        } else {
            ck_assert_msg(r == TD_E_CORRUPT || r == TD_E_CRC, "%d", r);
            if (i >= data_at)
                ck_assert_int_eq(r, TD_E_CRC);
        }
    }
    ck_assert_int_lt(accepted, (int)(data_at / 4));
    free(b);
    td_ckpt_snapshot_destroy(&s);
    rm_tree(dir);
}
END_TEST

START_TEST(test_crc_mismatch)
{
    char dir[64], path[4096], err[512];
    td_ckpt_snapshot s;
    td_ckpt_file *f;
    size_t n;
    scratch_dir(dir, sizeof dir);
    make_snapshot(&s, 3);
    ck_assert_int_eq(td_ckpt_write(dir, &s, 0, NULL, path, sizeof path, err,
                                   sizeof err), 0);
    uint8_t *b = slurp(path, &n);
    b[n - 1] ^= 0x80;
    spit(path, b, n);
    ck_assert_int_eq(td_ckpt_open(path, &f, err, sizeof err), TD_E_CRC);
    ck_assert_ptr_nonnull(strstr(err, "data CRC32"));
    free(b);
    td_ckpt_snapshot_destroy(&s);
    rm_tree(dir);
}
END_TEST

START_TEST(test_keep_last_k)
{
    char dir[64], err[512], stray[4200];
    td_ckpt_snapshot s;
    scratch_dir(dir, sizeof dir);
    snprintf(stray, sizeof stray, "%s/notes.txt", dir);
    spit(stray, "x", 1);
    /* a write that crashed half-way, long ago */
    snprintf(stray, sizeof stray, "%s/ckpt-000000000050.safetensors.tmp",
             dir);
    spit(stray, "half", 4);
    for (int step = 1; step <= 5; step++) {
        make_snapshot(&s, step * 100);
        ck_assert_int_eq(td_ckpt_write(dir, &s, 3, NULL, NULL, 0, err,
                                       sizeof err), 0);
        td_ckpt_snapshot_destroy(&s);
    }
    ck_assert_int_eq(count_files(dir, ".safetensors"), 3);
    ck_assert_int_eq(count_files(dir, ".txt"), 1); /* not ours: kept */
    ck_assert_int_eq(count_files(dir, ".tmp"), 0);  /* stale tmp: gone */
    ck_assert_int_eq(access(strcat(strcpy(stray, dir),
                                   "/ckpt-000000000200.safetensors"), F_OK),
                     -1);
    ck_assert_int_eq(access(strcat(strcpy(stray, dir),
                                   "/ckpt-000000000300.safetensors"), F_OK),
                     0);
    ck_assert_int_eq(td_ckpt_prune(dir, 1), 2);
    ck_assert_int_eq(count_files(dir, ".safetensors"), 1);
    rm_tree(dir);
}
END_TEST

/* A resume that skipped a newer, unusable checkpoint (torn by a crash, a
 * bad disk) goes on from an older step, so its next checkpoints have
 * lower steps than that file.  Pruning counted the unusable file among
 * the newest `keep` and deleted the checkpoint just written, reported as
 * written: with keep 1 every checkpoint vanished until the job passed the
 * bad file's step, and a crash meanwhile restarted it from step 0. */
START_TEST(test_prune_keeps_the_new_one_below_a_bad_newer)
{
    char dir[64], err[512], path[4096], bad[4200];
    td_ckpt_snapshot s;
    td_ckpt_file *f;
    scratch_dir(dir, sizeof dir);
    make_snapshot(&s, 500);
    ck_assert_int_eq(td_ckpt_write(dir, &s, 1, NULL, bad, sizeof bad, err,
                                   sizeof err), 0);
    ck_assert_int_eq(truncate(bad, 100), 0); /* torn */
    for (int step = 100; step <= 300; step += 100) {
        s.meta.step = step;
        ck_assert_int_eq(td_ckpt_write(dir, &s, 1, NULL, path, sizeof path,
                                       err, sizeof err), 0);
        ck_assert_msg(access(path, F_OK) == 0, "%s was pruned as it was "
                      "written", path);
    }
    /* keep 1: the newest written stays, the older written ones go; the
     * bad file above them is left (the next checkpoint at its step
     * replaces it) */
    ck_assert_int_eq(count_files(dir, ".safetensors"), 2);
    ck_assert_int_eq(access(bad, F_OK), 0);
    ck_assert_int_eq(td_ckpt_load_latest(dir, &f, path, sizeof path, err,
                                         sizeof err), 0);
    ck_assert_int_eq(td_ckpt_file_meta(f)->step, 300);
    ck_assert_ptr_nonnull(strstr(err, "ckpt-000000000500.safetensors"));
    td_ckpt_close(f);
    /* past the bad file's step, pruning is by step again */
    s.meta.step = 600;
    ck_assert_int_eq(td_ckpt_write(dir, &s, 1, NULL, path, sizeof path, err,
                                   sizeof err), 0);
    ck_assert_int_eq(count_files(dir, ".safetensors"), 1);
    ck_assert_int_eq(access(path, F_OK), 0);
    td_ckpt_snapshot_destroy(&s);
    rm_tree(dir);
}
END_TEST

/* A checkpoint folder others can write in (traind --run's
 * --checkpoint-dir in a group's shared folder): one of them plants the
 * next checkpoint's .tmp name as a symbolic or hard link to a file of the
 * user who runs the job.  The write went through the link (O_TRUNC without
 * O_NOFOLLOW), overwrote the victim with checkpoint bytes, and the rename
 * then published the link itself as the checkpoint. */
START_TEST(test_planted_tmp_link_is_not_followed)
{
    char dir[64], err[512], path[4096], victim[4200], tmp[4200];
    td_ckpt_snapshot s;
    td_ckpt_file *f;
    struct stat st;
    size_t n;
    scratch_dir(dir, sizeof dir);
    snprintf(victim, sizeof victim, "%s/victim.txt", dir);
    make_snapshot(&s, 100);
    for (int hard = 0; hard < 2; hard++) {
        spit(victim, "precious", 8);
        td_ckpt_filename(s.meta.step, path, sizeof path);
        snprintf(tmp, sizeof tmp, "%s/%s.tmp", dir, path);
        ck_assert_int_eq(hard ? link(victim, tmp) : symlink(victim, tmp), 0);
        ck_assert_int_eq(td_ckpt_write(dir, &s, 0, NULL, path, sizeof path,
                                       err, sizeof err), 0);
        uint8_t *b = slurp(victim, &n);
        ck_assert_msg(n == 8 && memcmp(b, "precious", 8) == 0,
                      "%s link: the victim was overwritten (%zu bytes)",
                      hard ? "hard" : "symbolic", n);
        free(b);
        ck_assert_int_eq(lstat(path, &st), 0);
        ck_assert_msg(S_ISREG(st.st_mode) && st.st_nlink == 1,
                      "%s is not a file of its own", path);
        ck_assert_int_eq(td_ckpt_open(path, &f, err, sizeof err), 0);
        td_ckpt_close(f);
        s.meta.step += 100;
    }
    td_ckpt_snapshot_destroy(&s);
    rm_tree(dir);
}
END_TEST

/* The CRC covers the data, not the header: a flipped bit in the step's
 * digits ("300" -> "200", one bit) left a file that validated, and resume
 * restored step 300's weights and optimizer state at step 200 (another
 * learning rate, the sampler 100 steps back).  The file's name carries the
 * step too; a file whose header disagrees is refused. */
START_TEST(test_header_step_must_match_the_name)
{
    char dir[64], err[512], path[4096];
    td_ckpt_snapshot s;
    td_ckpt_file *f;
    size_t n;
    scratch_dir(dir, sizeof dir);
    make_snapshot(&s, 100);
    ck_assert_int_eq(td_ckpt_write(dir, &s, 0, NULL, path, sizeof path, err,
                                   sizeof err), 0);
    s.meta.step = 300;
    ck_assert_int_eq(td_ckpt_write(dir, &s, 0, NULL, path, sizeof path, err,
                                   sizeof err), 0);
    uint8_t *b = slurp(path, &n);
    char *at = memmem(b, n, "\"step\":\"300\"", 12);
    ck_assert_ptr_nonnull(at);
    at[8] ^= 1; /* '3' -> '2' */
    spit(path, b, n);
    free(b);
    ck_assert_int_eq(td_ckpt_load_latest(dir, &f, path, sizeof path, err,
                                         sizeof err), 0);
    ck_assert_msg(td_ckpt_file_meta(f)->step == 100,
                  "resumed from %s at step %lld", path,
                  (long long)td_ckpt_file_meta(f)->step);
    ck_assert_msg(strstr(err, "ckpt-000000000300.safetensors") &&
                      strstr(err, "step 200"), "%s", err);
    td_ckpt_close(f);
    td_ckpt_snapshot_destroy(&s);
    rm_tree(dir);
}
END_TEST

/* A checkpoint that cannot be read for another reason than damage (here:
 * permission; in the daemon: out of memory or file descriptors) was
 * skipped like a corrupt one: with no other, td_ckpt_load_latest said
 * "no valid checkpoint" (-ENOENT) and the job started again from step 0,
 * its progress thrown away over a passing condition.  It now stops the
 * search with that error, naming the file.  Read as another user in a
 * child (root reads everything). */
START_TEST(test_unreadable_checkpoint_is_an_error_not_a_fresh_start)
{
    char dir[64], err[512], path[4096];
    td_ckpt_snapshot s;
    scratch_dir(dir, sizeof dir);
    make_snapshot(&s, 100);
    ck_assert_int_eq(td_ckpt_write(dir, &s, 0, NULL, path, sizeof path, err,
                                   sizeof err), 0);
    td_ckpt_snapshot_destroy(&s);
    ck_assert_int_eq(chmod(dir, 0755), 0);
    ck_assert_int_eq(chmod(path, 0600), 0);
    if (geteuid() != 0) {
        printf("test_unreadable_checkpoint_is_an_error_not_a_fresh_start: "
               "SKIPPED, needs root to read as another user\n");
        rm_tree(dir);
        return;
    }
    int pipefd[2];
    ck_assert_int_eq(pipe(pipefd), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        td_ckpt_file *f;
        close(pipefd[0]);
        if (setgid(65534) || setuid(65534))
            _exit(2);
        int rc = td_ckpt_load_latest(dir, &f, NULL, 0, err, sizeof err);
        if (write(pipefd[1], err, strlen(err) + 1) < 0)
            _exit(3);
        _exit(rc == -EACCES ? 0 : rc == -ENOENT ? 4 : 5);
    }
    close(pipefd[1]);
    char got[512] = "";
    ssize_t n = read(pipefd[0], got, sizeof got - 1);
    got[n > 0 ? n : 0] = '\0';
    close(pipefd[0]);
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "status %d (4: -ENOENT, a fresh start): %s",
                  WEXITSTATUS(st), got);
    ck_assert_msg(strstr(got, "ckpt-000000000100.safetensors") &&
                      strstr(got, "Permission denied"), "%s", got);
    rm_tree(dir);
}
END_TEST

START_TEST(test_load_latest_falls_back)
{
    char dir[64], err[512], path[4096];
    td_ckpt_snapshot s;
    td_ckpt_file *f;
    size_t n;
    scratch_dir(dir, sizeof dir);
    for (int step = 10; step <= 30; step += 10) {
        make_snapshot(&s, step);
        ck_assert_int_eq(td_ckpt_write(dir, &s, 0, NULL, path, sizeof path,
                                       err, sizeof err), 0);
        td_ckpt_snapshot_destroy(&s);
    }
    ck_assert_int_eq(td_ckpt_load_latest(dir, &f, path, sizeof path, err,
                                         sizeof err), 0);
    ck_assert_int_eq(td_ckpt_file_meta(f)->step, 30);
    td_ckpt_close(f);
    /* corrupt the newest: the one before is used */
    uint8_t *b = slurp(path, &n);
    b[n - 2] ^= 1;
    spit(path, b, n);
    free(b);
    ck_assert_int_eq(td_ckpt_load_latest(dir, &f, path, sizeof path, err,
                                         sizeof err), 0);
    ck_assert_int_eq(td_ckpt_file_meta(f)->step, 20);
    ck_assert_ptr_nonnull(strstr(path, "ckpt-000000000020.safetensors"));
    td_ckpt_close(f);
    /* truncate the other two: nothing usable */
    char p[4200];
    snprintf(p, sizeof p, "%s/ckpt-000000000020.safetensors", dir);
    ck_assert_int_eq(truncate(p, 5), 0);
    snprintf(p, sizeof p, "%s/ckpt-000000000010.safetensors", dir);
    ck_assert_int_eq(truncate(p, 100), 0);
    ck_assert_int_eq(td_ckpt_load_latest(dir, &f, path, sizeof path, err,
                                         sizeof err), -ENOENT);
    ck_assert_ptr_nonnull(strstr(err, "no valid checkpoint (3 unusable)"));
    rm_tree(dir);
}
END_TEST

/* Injected faults: a write that fails with ENOSPC after some bytes. */
struct fault { size_t budget; int err; };

static ssize_t faulty_write(void *user, int fd, const void *buf, size_t n)
{
    struct fault *ft = user;
    if (ft->budget == 0) {
        errno = ft->err;
        return -1;
    }
    if (n > ft->budget)
        n = ft->budget;
    ft->budget -= n;
    return write(fd, buf, n);
}

static int failing_fsync(void *user, int fd)
{
    errno = EIO;
    return -1;
}

/* The state after a failed write: step 100 intact, no tmp, no step 200. */
static void assert_old_intact(const char *dir)
{
    td_ckpt_file *f;
    char err[512];
    ck_assert_int_eq(count_files(dir, ".tmp"), 0);
    ck_assert_int_eq(count_files(dir, ".safetensors"), 1);
    ck_assert_int_eq(td_ckpt_load_latest(dir, &f, NULL, 0, err, sizeof err),
                     0);
    ck_assert_int_eq(td_ckpt_file_meta(f)->step, 100);
    td_ckpt_close(f);
}

START_TEST(test_injected_enospc_and_eio)
{
    char dir[64], err[512];
    td_ckpt_snapshot s;
    struct fault ft = {60, ENOSPC};
    td_ckpt_io io = {faulty_write, NULL, &ft};
    scratch_dir(dir, sizeof dir);
    make_snapshot(&s, 100);
    ck_assert_int_eq(td_ckpt_write(dir, &s, 1, NULL, NULL, 0, err,
                                   sizeof err), 0);
    s.meta.step = 200;
    ck_assert_int_eq(td_ckpt_write(dir, &s, 1, &io, NULL, 0, err, sizeof err),
                     -ENOSPC);
    ck_assert_ptr_nonnull(strstr(err, "No space left on device"));
    ck_assert_ptr_nonnull(strstr(err, "ckpt-000000000200.safetensors.tmp"));
    assert_old_intact(dir);
    td_ckpt_io io2 = {NULL, failing_fsync, NULL};
    ck_assert_int_eq(td_ckpt_write(dir, &s, 1, &io2, NULL, 0, err,
                                   sizeof err), -EIO);
    ck_assert_ptr_nonnull(strstr(err, "fsync"));
    assert_old_intact(dir);
    td_ckpt_snapshot_destroy(&s);
    rm_tree(dir);
}
END_TEST

/* A real full file system: a 256 KiB tmpfs in a private mount namespace
 * (vanishes with this test process).  Skipped where mounting is denied. */
START_TEST(test_real_enospc)
{
    char dir[64], err[512];
    td_ckpt_snapshot s, big;
    void *p;
    scratch_dir(dir, sizeof dir);
    if (unshare(CLONE_NEWNS) < 0 ||
        mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
        mount("tdtest", dir, "tmpfs", 0, "size=256k") < 0) {
        printf("test_real_enospc: SKIPPED, cannot mount a tmpfs here (%s)\n",
               strerror(errno));
        rmdir(dir);
        return;
    }
    make_snapshot(&s, 100);
    ck_assert_int_eq(td_ckpt_write(dir, &s, 2, NULL, NULL, 0, err,
                                   sizeof err), 0);
    ck_assert_int_eq(td_ckpt_snapshot_init(&big, 1 << 20, 1), 0);
    ck_assert_int_eq(td_ckpt_snapshot_add(&big, "x", TD_DT_U8, 1,
                                          (int64_t[]){1 << 20}, &p), 0);
    memset(p, 0x5a, 1 << 20);
    big.meta.step = 200;
    ck_assert_int_eq(td_ckpt_write(dir, &big, 2, NULL, NULL, 0, err,
                                   sizeof err), -ENOSPC);
    assert_old_intact(dir);
    /* the space came back: the next (small) one succeeds */
    s.meta.step = 300;
    ck_assert_int_eq(td_ckpt_write(dir, &s, 2, NULL, NULL, 0, err,
                                   sizeof err), 0);
    td_ckpt_snapshot_destroy(&s);
    td_ckpt_snapshot_destroy(&big);
    umount2(dir, MNT_DETACH);
    rm_tree(dir);
}
END_TEST

/* A kill -9 (or power loss) during a big write leaves its .tmp; the job
 * resumes from an older step and its next checkpoints have other steps.
 * The stale .tmp was removed only by the pruning after a successful
 * write, so on a nearly full disk it made every later write fail with
 * ENOSPC, and none ever succeeded to remove it. */
START_TEST(test_stale_tmp_does_not_fill_the_disk)
{
    char dir[64], err[512], stale[4200];
    td_ckpt_snapshot s, big;
    void *p;
    scratch_dir(dir, sizeof dir);
    if (unshare(CLONE_NEWNS) < 0 ||
        mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
        mount("tdtest", dir, "tmpfs", 0, "size=256k") < 0) {
        printf("test_stale_tmp_does_not_fill_the_disk: SKIPPED, cannot "
               "mount a tmpfs here (%s)\n", strerror(errno));
        rmdir(dir);
        return;
    }
    make_snapshot(&s, 100);
    ck_assert_int_eq(td_ckpt_write(dir, &s, 2, NULL, NULL, 0, err,
                                   sizeof err), 0);
    /* the crash's leftover: 150 KiB of a step-150 checkpoint */
    snprintf(stale, sizeof stale, "%s/ckpt-000000000150.safetensors.tmp",
             dir);
    uint8_t *junk = calloc(1, 150 << 10);
    spit(stale, junk, 150 << 10);
    free(junk);
    /* the resumed job's next checkpoint, 120 KiB: fits only without it */
    ck_assert_int_eq(td_ckpt_snapshot_init(&big, 120 << 10, 1), 0);
    ck_assert_int_eq(td_ckpt_snapshot_add(&big, "x", TD_DT_U8, 1,
                                          (int64_t[]){120 << 10}, &p), 0);
    memset(p, 0x5a, 120 << 10);
    big.meta.step = 130;
    ck_assert_msg(td_ckpt_write(dir, &big, 2, NULL, NULL, 0, err,
                                sizeof err) == 0, "%s", err);
    ck_assert_int_eq(access(stale, F_OK), -1);
    ck_assert_int_eq(count_files(dir, ".safetensors"), 2);
    td_ckpt_snapshot_destroy(&s);
    td_ckpt_snapshot_destroy(&big);
    umount2(dir, MNT_DETACH);
    rm_tree(dir);
}
END_TEST

/* Root ignores permission bits, so use paths nobody can create in: a file
 * standing where the directory should be, and /proc. */
START_TEST(test_unwritable_dir)
{
    char dir[64], notdir[4200], err[512];
    td_ckpt_snapshot s;
    scratch_dir(dir, sizeof dir);
    make_snapshot(&s, 100);
    snprintf(notdir, sizeof notdir, "%s/file", dir);
    spit(notdir, "x", 1);
    ck_assert_int_eq(td_ckpt_write(notdir, &s, 1, NULL, NULL, 0, err,
                                   sizeof err), -ENOTDIR);
    ck_assert_ptr_nonnull(strstr(err, "cannot create"));
    ck_assert_int_eq(td_ckpt_write("/proc/self", &s, 1, NULL, NULL, 0, err,
                                   sizeof err) < 0, 1);
    td_ckpt_snapshot_destroy(&s);
    rm_tree(dir);
}
END_TEST

/* A read-only file system (EROFS), which binds root as well: a read-only
 * tmpfs in a private mount namespace.  Skipped where mounting is denied. */
START_TEST(test_read_only_fs)
{
    char dir[64], err[512];
    td_ckpt_snapshot s;
    scratch_dir(dir, sizeof dir);
    if (unshare(CLONE_NEWNS) < 0 ||
        mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
        mount("tdtest", dir, "tmpfs", MS_RDONLY, "size=64k") < 0) {
        printf("test_read_only_fs: SKIPPED, cannot mount a tmpfs here (%s)\n",
               strerror(errno));
        rmdir(dir);
        return;
    }
    make_snapshot(&s, 100);
    ck_assert_int_eq(td_ckpt_write(dir, &s, 1, NULL, NULL, 0, err,
                                   sizeof err), -EROFS);
    ck_assert_ptr_nonnull(strstr(err, "cannot create"));
    ck_assert_ptr_nonnull(strstr(err, "Read-only file system"));
    td_ckpt_snapshot_destroy(&s);
    umount2(dir, MNT_DETACH);
    rmdir(dir);
}
END_TEST

static Suite *checkpoint_suite(void)
{
    Suite *s = suite_create("checkpoint");
    TCase *tc = tcase_create("checkpoint");
    tcase_add_test(tc, test_roundtrip);
    tcase_add_test(tc, test_cut_short_after_open);
    tcase_add_test(tc, test_file_layout);
    tcase_add_test(tc, test_plain_safetensors);
    tcase_add_test(tc, test_snapshot_add_errors);
    tcase_add_test(tc, test_read_errors);
    tcase_add_test(tc, test_bad_headers);
    tcase_add_test(tc, test_truncations);
    tcase_add_test(tc, test_bit_flips);
    tcase_add_test(tc, test_crc_mismatch);
    tcase_add_test(tc, test_keep_last_k);
    tcase_add_test(tc, test_load_latest_falls_back);
    tcase_add_test(tc, test_unreadable_checkpoint_is_an_error_not_a_fresh_start);
    tcase_add_test(tc, test_header_step_must_match_the_name);
    tcase_add_test(tc, test_planted_tmp_link_is_not_followed);
    tcase_add_test(tc, test_prune_keeps_the_new_one_below_a_bad_newer);
    tcase_add_test(tc, test_injected_enospc_and_eio);
    tcase_add_test(tc, test_real_enospc);
    tcase_add_test(tc, test_stale_tmp_does_not_fill_the_disk);
    tcase_add_test(tc, test_unwritable_dir);
    tcase_add_test(tc, test_read_only_fs);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(checkpoint_suite)
