/* test_fscred.c - reading files as another user: the identity looked up
 * from the passwd and group databases, the kernel refusing what that user
 * may not open, the switch confined to the calling thread, and everything
 * restored on leave.  The switching tests need root (CI runs as root);
 * elsewhere they check that no switch is offered. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/fscred.h"
#include "tdtest.h"

START_TEST(test_root_identity_from_passwd)
{
    td_fscred c;
    char err[128] = "";
    ck_assert_int_eq(td_fscred_for_uid(0, &c, err, sizeof err), 0);
    ck_assert_int_eq(c.set, 1);
    ck_assert_uint_eq(c.uid, 0);
    ck_assert_uint_eq(c.gid, 0);
    ck_assert_int_ge(c.ngroups, 1);
    ck_assert_int_le(c.ngroups, TD_FSCRED_MAX_GROUPS);
    int has0 = 0;
    for (int i = 0; i < c.ngroups; i++)
        has0 |= c.groups[i] == 0;
    ck_assert_msg(has0, "root's group list lacks its primary group 0");
}
END_TEST

START_TEST(test_unknown_uid_is_named)
{
    td_fscred c;
    char err[128] = "";
    ck_assert_int_eq(td_fscred_for_uid(3999999999u, &c, err, sizeof err),
                     -ENOENT);
    ck_assert_str_eq(err, "uid 3999999999 has no passwd entry");
    ck_assert_int_eq(c.set, 0);
}
END_TEST

START_TEST(test_unset_identity_is_a_no_op)
{
    td_fscred_saved sv;
    td_fscred none = {0};
    uid_t before = (uid_t)setfsuid((uid_t)-1);
    ck_assert_int_eq(td_fscred_enter(NULL, &sv), 0);
    ck_assert_int_eq(sv.active, 0);
    td_fscred_leave(&sv);
    ck_assert_int_eq(td_fscred_enter(&none, &sv), 0);
    ck_assert_int_eq(sv.active, 0);
    td_fscred_leave(&sv);
    ck_assert_uint_eq((uid_t)setfsuid((uid_t)-1), before);
    ck_assert_int_eq(td_fscred_can_switch(), geteuid() == 0);
}
END_TEST

/* A folder only root may write into, and the uid of an ordinary user. */
static char dir[64];
static uid_t other;

static int try_create(const char *name)
{
    char p[128];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    int fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0)
        return -errno;
    close(fd);
    return 0;
}

struct as_other {
    pthread_barrier_t inside, checked;
    int enter_rc, create_rc;
    uid_t fsuid_inside;
};

static void *other_thread(void *arg)
{
    struct as_other *a = arg;
    td_fscred c;
    td_fscred_saved sv;
    a->enter_rc = td_fscred_for_uid(other, &c, NULL, 0);
    if (a->enter_rc == 0)
        a->enter_rc = td_fscred_enter(&c, &sv);
    a->fsuid_inside = (uid_t)setfsuid((uid_t)-1);
    a->create_rc = try_create("as-other");
    pthread_barrier_wait(&a->inside);  /* main thread checks its own rights */
    pthread_barrier_wait(&a->checked);
    td_fscred_leave(&sv);
    return NULL;
}

START_TEST(test_switch_is_per_thread_and_checked_by_the_kernel)
{
    if (!td_fscred_can_switch())
        return; /* not root: nothing to switch (checked above) */
    struct passwd *pw = getpwnam("nobody");
    ck_assert_msg(pw != NULL, "no user 'nobody' to switch to");
    other = pw->pw_uid;
    snprintf(dir, sizeof dir, "/tmp/td-fscred-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    ck_assert_int_eq(chmod(dir, 0755), 0);

    struct as_other a = {0};
    pthread_barrier_init(&a.inside, NULL, 2);
    pthread_barrier_init(&a.checked, NULL, 2);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, other_thread, &a), 0);
    pthread_barrier_wait(&a.inside);
    /* While the other thread is 'nobody', this one is still root. */
    ck_assert_int_eq(try_create("as-root-meanwhile"), 0);
    ck_assert_uint_eq((uid_t)setfsuid((uid_t)-1), 0);
    ck_assert_uint_eq(getuid(), 0);
    ck_assert_uint_eq(geteuid(), 0);
    pthread_barrier_wait(&a.checked);
    pthread_join(t, NULL);

    ck_assert_int_eq(a.enter_rc, 0);
    ck_assert_uint_eq(a.fsuid_inside, other);
    ck_assert_int_eq(a.create_rc, -EACCES);
    ck_assert_int_eq(try_create("as-root-after"), 0);

    td_test_sh("/", "rm -rf '%s'", dir);
}
END_TEST

START_TEST(test_leave_restores_identity_and_groups)
{
    if (!td_fscred_can_switch())
        return;
    struct passwd *pw = getpwnam("nobody");
    ck_assert_ptr_nonnull(pw);
    gid_t before[TD_FSCRED_MAX_GROUPS], after[TD_FSCRED_MAX_GROUPS];
    int nb = getgroups(TD_FSCRED_MAX_GROUPS, before);
    td_fscred c;
    td_fscred_saved sv;
    ck_assert_int_eq(td_fscred_for_uid(pw->pw_uid, &c, NULL, 0), 0);
    ck_assert_int_eq(td_fscred_enter(&c, &sv), 0);
    ck_assert_int_eq(sv.active, 1);
    ck_assert_uint_eq((gid_t)setfsgid((gid_t)-1), pw->pw_gid);
    gid_t inside[TD_FSCRED_MAX_GROUPS];
    int ni = (int)syscall(SYS_getgroups, TD_FSCRED_MAX_GROUPS, inside);
    ck_assert_int_eq(ni, c.ngroups);
    td_fscred_leave(&sv);
    ck_assert_uint_eq((uid_t)setfsuid((uid_t)-1), 0);
    ck_assert_uint_eq((gid_t)setfsgid((gid_t)-1), 0);
    int na = getgroups(TD_FSCRED_MAX_GROUPS, after);
    ck_assert_int_eq(na, nb);
    ck_assert_mem_eq(after, before, (size_t)nb * sizeof(gid_t));
}
END_TEST

/* How the daemon reads a user's files: as itself for root and its own
 * uid; as the user where it may switch, else as itself with every file's
 * bits checked; nothing for a uid with no passwd entry. */
START_TEST(test_for_reader_by_daemon_kind)
{
    td_fscred c;
    char err[128] = "";
    ck_assert_int_eq(td_fscred_for_reader(0, &c, err, sizeof err), 0);
    ck_assert_int_eq(c.set + c.bits, 0);
    ck_assert_int_eq(td_fscred_for_reader(geteuid(), &c, err, sizeof err), 0);
    ck_assert_int_eq(c.set + c.bits, 0);
    struct passwd *pw = getpwnam("nobody");
    ck_assert_ptr_nonnull(pw);
    ck_assert_int_eq(td_fscred_for_reader(pw->pw_uid, &c, err, sizeof err),
                     0);
    ck_assert_uint_eq(c.uid, pw->pw_uid);
    ck_assert_uint_eq(c.gid, pw->pw_gid);
    ck_assert_int_eq(c.set, td_fscred_can_switch());
    ck_assert_int_eq(c.bits, !td_fscred_can_switch());
    c.set = c.bits = 1;
    ck_assert_int_eq(td_fscred_for_reader(3999999999u, &c, err, sizeof err),
                     -ENOENT);
    ck_assert_str_eq(err, "uid 3999999999 has no passwd entry");
    ck_assert_int_eq(c.set + c.bits, 0);
}
END_TEST

/* The bits check (a daemon that cannot switch): owner, group and other
 * bits of the file and search bits of every folder above it, for an
 * identity given by hand (no root needed: only stat is used). */
START_TEST(test_bits_ok_file_and_folders)
{
    char tdir[] = "/tmp/td-fscred-XXXXXX", f[64], sub[64];
    ck_assert_ptr_nonnull(mkdtemp(tdir));
    chmod(tdir, 0755);
    snprintf(sub, sizeof sub, "%s/d", tdir);
    snprintf(f, sizeof f, "%s/d/f", tdir);
    ck_assert_int_eq(mkdir(sub, 0755), 0);
    int fd = open(f, O_WRONLY | O_CREAT, 0644);
    ck_assert_int_ge(fd, 0);
    close(fd);
    struct stat st;
    ck_assert_int_eq(stat(f, &st), 0);
    td_fscred someone = {.uid = st.st_uid + 12345, .gid = 54321, .ngroups = 1,
                       .groups = {54321}};
    ck_assert_int_eq(td_fscred_bits_ok(&someone, f, 0), 1);
    chmod(sub, 0750); /* the folder shuts others out, the file does not */
    ck_assert_int_eq(td_fscred_bits_ok(&someone, f, 0), 0);
    someone.groups[0] = st.st_gid; /* in the folder's group */
    ck_assert_int_eq(td_fscred_bits_ok(&someone, f, 0), 1);
    ck_assert_int_eq(td_fscred_bits_ok(&someone, sub, 1), 1);
    chmod(f, 0604); /* group bits give nothing, though other bits would */
    ck_assert_int_eq(td_fscred_bits_ok(&someone, f, 0), 0);
    someone.uid = st.st_uid; /* the owner: owner bits only */
    chmod(f, 0044);
    ck_assert_int_eq(td_fscred_bits_ok(&someone, f, 0), 0);
    unlink(f);
    rmdir(sub);
    rmdir(tdir);
}
END_TEST

static Suite *fscred_suite(void)
{
    Suite *s = suite_create("fscred");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_root_identity_from_passwd);
    tcase_add_test(tc, test_unknown_uid_is_named);
    tcase_add_test(tc, test_unset_identity_is_a_no_op);
    tcase_add_test(tc, test_switch_is_per_thread_and_checked_by_the_kernel);
    tcase_add_test(tc, test_leave_restores_identity_and_groups);
    tcase_add_test(tc, test_bits_ok_file_and_folders);
    tcase_add_test(tc, test_for_reader_by_daemon_kind);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(fscred_suite)
