/* test_fsio.c - durable replacement (td_write_atomic, td_atomic_*),
 * td_mkdirs, and the shared error and JSON wording helpers of lib/base. */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/fsio.h"
#include "base/json.h"
#include "tdtest.h"

static char *tmpdir(void)
{
    char *d = strdup("/tmp/td-fsio-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(d));
    return d;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    static char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* Files in dir other than . and .. */
static int entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

struct calls { int fsyncs, dir_fsyncs, fail_fsync_on; int failed_with; };

static int counting_fsync(void *user, int fd)
{
    struct calls *c = user;
    struct stat st;
    fstat(fd, &st);
    int is_dir = S_ISDIR(st.st_mode);
    c->fsyncs++;
    c->dir_fsyncs += is_dir;
    if (c->fail_fsync_on == c->fsyncs) {
        errno = c->failed_with;
        return -1;
    }
    return fsync(fd);
}

START_TEST(test_replace_syncs_file_then_folder)
{
    char *d = tmpdir(), path[256], err[256] = "";
    snprintf(path, sizeof path, "%s/rec.json", d);
    struct calls c = {0};
    td_fs_io io = {NULL, counting_fsync, &c};
    ck_assert_int_eq(td_write_atomic(path, 0640, "old", 3, &io, err,
                                     sizeof err), 0);
    ck_assert_str_eq(slurp(path), "old");
    /* One fsync of the file, then one of its folder, in that order. */
    ck_assert_int_eq(c.fsyncs, 2);
    ck_assert_int_eq(c.dir_fsyncs, 1);
    ck_assert_int_eq(td_write_atomic(path, 0640, "new!", 4, &io, err,
                                     sizeof err), 0);
    ck_assert_str_eq(slurp(path), "new!");
    ck_assert_int_eq(entries(d), 1); /* no .tmp left */
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq(st.st_mode & 0077, 0640 & 0077 & ~(mode_t)022);
    free(d);
}
END_TEST

START_TEST(test_failed_file_fsync_keeps_the_old_file)
{
    char *d = tmpdir(), path[256], err[256] = "";
    snprintf(path, sizeof path, "%s/rec.json", d);
    ck_assert_int_eq(td_write_atomic(path, 0644, "old", 3, NULL, err,
                                     sizeof err), 0);
    struct calls c = {.fail_fsync_on = 1, .failed_with = EIO};
    td_fs_io io = {NULL, counting_fsync, &c};
    ck_assert_int_eq(td_write_atomic(path, 0644, "new", 3, &io, err,
                                     sizeof err), -EIO);
    ck_assert_str_eq(slurp(path), "old");
    ck_assert_int_eq(entries(d), 1); /* the .tmp was removed */
    ck_assert_msg(strstr(err, "fsync") && strstr(err, "rec.json.tmp") &&
                      strstr(err, "Input/output error"),
                  "err: %s", err);
    free(d);
}
END_TEST

START_TEST(test_failed_folder_fsync_is_reported)
{
    /* daemon.c once ignored this: the file is complete, but its new name
     * may not survive a crash, and the caller must hear about it. */
    char *d = tmpdir(), path[256], err[256] = "";
    snprintf(path, sizeof path, "%s/rec.json", d);
    struct calls c = {.fail_fsync_on = 2, .failed_with = EIO};
    td_fs_io io = {NULL, counting_fsync, &c};
    ck_assert_int_eq(td_write_atomic(path, 0644, "new", 3, &io, err,
                                     sizeof err), -EIO);
    ck_assert_int_eq(c.dir_fsyncs, 1);
    ck_assert_str_eq(slurp(path), "new");
    ck_assert_msg(strstr(err, "fsync of the folder"), "err: %s", err);
    free(d);
}
END_TEST

static ssize_t short_disk(void *user, int fd, const void *buf, size_t n)
{
    size_t *budget = user;
    if (*budget == 0) {
        errno = ENOSPC;
        return -1;
    }
    size_t k = n < *budget ? n : *budget;
    *budget -= k;
    return write(fd, buf, k);
}

START_TEST(test_full_disk_keeps_the_old_file)
{
    char *d = tmpdir(), path[256], err[256] = "";
    snprintf(path, sizeof path, "%s/shard.tar", d);
    ck_assert_int_eq(td_write_atomic(path, 0644, "complete", 8, NULL, err,
                                     sizeof err), 0);
    size_t budget = 5;
    td_fs_io io = {short_disk, NULL, &budget};
    td_atomic_file f;
    ck_assert_int_eq(td_atomic_open(&f, path, 0644, 0, &io, err, sizeof err),
                     0);
    ck_assert_int_eq(td_write_all(f.fd, "0123456789", 10, &io), -ENOSPC);
    td_atomic_abort(&f);
    ck_assert_str_eq(slurp(path), "complete");
    ck_assert_int_eq(entries(d), 1);
    free(d);
}
END_TEST

/* What stands at the tmp name is never written through: a symbolic or
 * hard link to someone's file planted there by another user who can
 * write in the folder (O_TRUNC followed it and overwrote the file). */
START_TEST(test_planted_tmp_link_is_replaced)
{
    char *d = tmpdir(), path[256], tmp[300], victim[256], err[256] = "";
    struct stat st;
    snprintf(path, sizeof path, "%s/job.json", d);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    snprintf(victim, sizeof victim, "%s/victim", d);
    for (int hard = 0; hard < 2; hard++) {
        FILE *f = fopen(victim, "w");
        ck_assert_ptr_nonnull(f);
        fputs("precious", f);
        fclose(f);
        ck_assert_int_eq(hard ? link(victim, tmp) : symlink(victim, tmp), 0);
        ck_assert_int_eq(td_write_atomic(path, 0600, "record", 6, NULL, err,
                                         sizeof err), 0);
        ck_assert_str_eq(slurp(victim), "precious");
        ck_assert_str_eq(slurp(path), "record");
        ck_assert_int_eq(lstat(path, &st), 0);
        ck_assert(S_ISREG(st.st_mode) && st.st_nlink == 1);
    }
    free(d);
}
END_TEST

START_TEST(test_pid_tmp_and_missing_folder)
{
    char *d = tmpdir(), path[256], err[256] = "";
    snprintf(path, sizeof path, "%s/x.tdidx", d);
    td_atomic_file f;
    ck_assert_int_eq(td_atomic_open(&f, path, 0644, TD_ATOMIC_PID_TMP, NULL,
                                    err, sizeof err), 0);
    char want[300];
    snprintf(want, sizeof want, "%s.%ld.tmp", path, (long)getpid());
    ck_assert_str_eq(f.tmp, want);
    ck_assert_int_eq(td_write_all(f.fd, "idx", 3, NULL), 0);
    ck_assert_int_eq(td_atomic_commit(&f, err, sizeof err), 0);
    ck_assert_str_eq(slurp(path), "idx");
    snprintf(path, sizeof path, "%s/no/such/folder/x", d);
    ck_assert_int_eq(td_write_atomic(path, 0644, "x", 1, NULL, err,
                                     sizeof err), -ENOENT);
    ck_assert_msg(strstr(err, "cannot create") && strstr(err, "x.tmp"),
                  "err: %s", err);
    free(d);
}
END_TEST

START_TEST(test_mkdirs)
{
    char *d = tmpdir(), path[256];
    snprintf(path, sizeof path, "%s/a/b/c", d);
    ck_assert_int_eq(td_mkdirs(path, 0750), 0);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert(S_ISDIR(st.st_mode));
    ck_assert_int_eq(td_mkdirs(path, 0750), 0); /* exists: fine */
    snprintf(path, sizeof path, "%s/a/file", d);
    ck_assert_int_eq(td_write_atomic(path, 0644, "", 0, NULL, NULL, 0), 0);
    ck_assert_int_eq(td_mkdirs(path, 0750), -ENOTDIR);
    snprintf(path, sizeof path, "%s/a/file/below", d);
    ck_assert_int_eq(td_mkdirs(path, 0750), -ENOTDIR);
    free(d);
}
END_TEST

/* A folder made durable: its parent (and nothing else) is fsynced once,
 * when the folder is new; a folder already there costs no fsync; a file
 * in its place is -ENOTDIR; a failing fsync is reported. */
START_TEST(test_mkdir_durable_syncs_the_parent)
{
    char *d = tmpdir(), path[256];
    struct stat parent, st;
    ck_assert_int_eq(stat(d, &parent), 0);
    struct calls c = {0};
    td_fs_io io = {NULL, counting_fsync, &c};
    snprintf(path, sizeof path, "%s/job-7", d);
    ck_assert_int_eq(td_mkdir_durable(path, 0750, &io), 0);
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert(S_ISDIR(st.st_mode));
    ck_assert_int_eq(c.fsyncs, 1);
    ck_assert_int_eq(c.dir_fsyncs, 1);
    ck_assert_int_eq(td_mkdir_durable(path, 0750, &io), 0);
    ck_assert_int_eq(c.fsyncs, 1); /* there already */
    snprintf(path, sizeof path, "%s/file", d);
    ck_assert_int_eq(td_write_atomic(path, 0644, "", 0, NULL, NULL, 0), 0);
    ck_assert_int_eq(td_mkdir_durable(path, 0750, &io), -ENOTDIR);
    c = (struct calls){.fail_fsync_on = 1, .failed_with = EIO};
    snprintf(path, sizeof path, "%s/job-8", d);
    ck_assert_int_eq(td_mkdir_durable(path, 0750, &io), -EIO);
    free(d);
}
END_TEST

/* td_read_all: the whole file, or what there is of a shorter one. */
START_TEST(test_read_all)
{
    char *d = tmpdir(), path[256], buf[16];
    snprintf(path, sizeof path, "%s/f", d);
    ck_assert_int_eq(td_write_atomic(path, 0644, "0123456789", 10, NULL,
                                     NULL, 0), 0);
    int fd = open(path, O_RDONLY);
    ck_assert_int_ge(fd, 0);
    size_t got = 99;
    ck_assert_int_eq(td_read_all(fd, buf, 4, &got), 0);
    ck_assert_uint_eq(got, 4);
    ck_assert(memcmp(buf, "0123", 4) == 0);
    ck_assert_int_eq(td_read_all(fd, buf, sizeof buf, &got), 0);
    ck_assert_uint_eq(got, 10); /* shorter than asked */
    ck_assert(memcmp(buf, "0123456789", 10) == 0);
    close(fd);
    fd = open(d, O_RDONLY | O_DIRECTORY);
    ck_assert_int_eq(td_read_all(fd, buf, sizeof buf, &got), -EISDIR);
    close(fd);
    free(d);
}
END_TEST

/* A FIFO, a device, a folder: refused at once, never read (a FIFO's
 * open() would wait for a writer); a regular file: open, blocking. */
START_TEST(test_open_regular)
{
    char *d = tmpdir(), path[256];
    snprintf(path, sizeof path, "%s/p", d);
    ck_assert_int_eq(mkfifo(path, 0644), 0);
    alarm(10);
    ck_assert_int_eq(td_open_regular(path), TD_E_NOTREG);
    alarm(0);
    ck_assert_int_eq(td_open_regular("/dev/zero"), TD_E_NOTREG);
    ck_assert_int_eq(td_open_regular(d), TD_E_NOTREG);
    snprintf(path, sizeof path, "%s/none", d);
    ck_assert_int_eq(td_open_regular(path), -ENOENT);
    snprintf(path, sizeof path, "%s/f", d);
    ck_assert_int_eq(td_write_atomic(path, 0644, "x", 1, NULL, NULL, 0), 0);
    int fd = td_open_regular(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
    close(fd);
    unlink(path);
    snprintf(path, sizeof path, "%s/p", d);
    unlink(path);
    rmdir(d);
    free(d);
}
END_TEST

START_TEST(test_set_error_and_type_names)
{
    char err[32] = "untouched";
    ck_assert_int_eq(td_set_error(err, sizeof err, -ENOENT, "%s: %d", "x", 7),
                     -ENOENT);
    ck_assert_str_eq(err, "x: 7");
    ck_assert_int_eq(td_set_error(NULL, 0, TD_E_SPEC, "ignored"), TD_E_SPEC);
    td_set_error(err, 4, 0, "truncated");
    ck_assert_str_eq(err, "tru");
    ck_assert_str_eq(td_json_type_name(JSON_TRUE), "true or false");
    ck_assert_str_eq(td_json_type_name(JSON_FALSE), "true or false");
    ck_assert_str_eq(td_json_type_name(JSON_REAL), "a number");
    ck_assert_str_eq(td_json_type_name(JSON_NULL), "null");
}
END_TEST

static Suite *fsio_suite(void)
{
    Suite *s = suite_create("fsio");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_replace_syncs_file_then_folder);
    tcase_add_test(tc, test_open_regular);
    tcase_add_test(tc, test_failed_file_fsync_keeps_the_old_file);
    tcase_add_test(tc, test_failed_folder_fsync_is_reported);
    tcase_add_test(tc, test_full_disk_keeps_the_old_file);
    tcase_add_test(tc, test_pid_tmp_and_missing_folder);
    tcase_add_test(tc, test_planted_tmp_link_is_replaced);
    tcase_add_test(tc, test_mkdirs);
    tcase_add_test(tc, test_mkdir_durable_syncs_the_parent);
    tcase_add_test(tc, test_read_all);
    tcase_add_test(tc, test_set_error_and_type_names);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(fsio_suite)
