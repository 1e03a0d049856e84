/* test_checkpoint_numpy.c - a checkpoint written by traind is read back by
 * a short numpy script (header JSON + np.frombuffer), the way a PyTorch or
 * numpy user would, and its values compared.  Exits 77 (skipped) when
 * /usr/bin/python3 has no numpy (Debian: python3-numpy). */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "ckpt_helpers.h"

#define PY "/usr/bin/python3"

/* Prints "ok" when every tensor matches what make_snapshot() stored. */
static const char *script =
    "import json, struct, sys\n"
    "import numpy as np\n"
    "b = open(sys.argv[1], 'rb').read()\n"
    "(n,) = struct.unpack('<Q', b[:8])\n"
    "hdr = json.loads(b[8:8 + n])\n"
    "data = b[8 + n:]\n"
    "dt = {'F32': '<f4', 'I64': '<i8', 'U8': 'u1'}\n"
    "def get(name):\n"
    "    e = hdr[name]\n"
    "    s, t = e['data_offsets']\n"
    "    return np.frombuffer(data[s:t], dtype=dt[e['dtype']]).reshape(e['shape'])\n"
    "w = get('w')\n"
    "assert w.shape == (2, 3), w.shape\n"
    "assert np.array_equal(w, (np.arange(6, dtype=np.float32) * 0.5 - 1).reshape(2, 3))\n"
    "assert get('step').shape == () and int(get('step')) == 77\n"
    "assert list(get('bytes')) == [0, 7, 14, 21, 28]\n"
    "assert get('empty').size == 0\n"
    "m = hdr['__metadata__']\n"
    "assert m['step'] == '77' and m['epoch'] == '2' and m['seed'] == '42', m\n"
    "assert m['spec_hash'] == 'fedcba9876543210', m\n"
    "print('ok')\n";

START_TEST(test_numpy_reads_checkpoint)
{
    char dir[64], path[4096], err[512], cmd[8400], spath[4200], out[64] = "";
    td_ckpt_snapshot s;
    scratch_dir(dir, sizeof dir);
    make_snapshot(&s, 77);
    ck_assert_int_eq(td_ckpt_write(dir, &s, 0, NULL, path, sizeof path, err,
                                   sizeof err), 0);
    snprintf(spath, sizeof spath, "%s/read.py", dir);
    FILE *f = fopen(spath, "w");
    ck_assert_ptr_nonnull(f);
    fputs(script, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, PY " %s %s 2>&1", spath, path);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    int status = pclose(p);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "numpy reader failed: %s", out);
    ck_assert_str_eq(out, "ok\n");
    td_ckpt_snapshot_destroy(&s);
    rm_tree(dir);
}
END_TEST

int main(void)
{
    if (system(PY " -c 'import numpy' >/dev/null 2>&1") != 0) {
        printf("SKIP: " PY " with numpy not found (apt-get install "
               "python3-numpy)\n");
        return TD_TEST_SKIP;
    }
    Suite *su = suite_create("checkpoint_numpy");
    TCase *tc = tcase_create("numpy");
    tcase_add_test(tc, test_numpy_reads_checkpoint);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
