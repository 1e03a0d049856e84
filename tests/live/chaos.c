/* chaos.c - see chaos.h. */
#define _GNU_SOURCE
#include "chaos.h"

#include <check.h>
#include <dirent.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "store/checkpoint.h"

static json_t *th__show(int fd, int64_t id)
{
    json_t *r = th_job_request(fd, "show", id);
    json_t *j = json_incref(json_object_get(th_ok(r), "job"));
    json_decref(r);
    return j;
}

/* The newest complete checkpoint step in dir (by name), or -1; sets
 * *writing when a .tmp is there. */
static int64_t td__newest(const char *dir, int *writing)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int64_t best = -1;
    if (writing)
        *writing = 0;
    if (!d)
        return -1;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (strncmp(e->d_name, "ckpt-", 5) != 0)
            continue;
        if (n > 4 && strcmp(e->d_name + n - 4, ".tmp") == 0) {
            if (writing)
                *writing = 1;
            continue;
        }
        int64_t s = strtoll(e->d_name + 5, NULL, 10);
        if (s > best)
            best = s;
    }
    closedir(d);
    return best;
}

/* The step of the newest checkpoint that validates, or -1. */
static int64_t td__newest_valid(const char *dir)
{
    td_ckpt_file *f;
    char path[4096], err[512];
    if (td_ckpt_load_latest(dir, &f, path, sizeof path, err, sizeof err))
        return -1;
    td_ckpt_close(f);
    const char *b = strrchr(path, '/');
    return b ? strtoll(b + 1 + 5, NULL, 10) : -1;
}

static void td__kill9(td_harness *h)
{
    int st;
    kill(h->pid, SIGKILL);
    waitpid(h->pid, &st, 0);
    h->pid = 0;
}

static td_ckpt_file *td__final(const char *dir, int64_t *step)
{
    td_ckpt_file *f = NULL;
    char path[4096], err[512];
    *step = -1;
    if (td_ckpt_load_latest(dir, &f, path, sizeof path, err, sizeof err))
        return NULL;
    const char *b = strrchr(path, '/');
    *step = b ? strtoll(b + 6, NULL, 10) : -1;
    return f;
}

static int td__wait_done(td_harness *h, int64_t id, int timeout_s)
{
    int fd = th_connect(h, NULL);
    int ok = th_wait_state(fd, id, "completed", timeout_s * 1000);
    close(fd);
    return ok;
}

void td_chaos_run(td_harness *h, const td_chaos_opts *o, td_chaos_result *r)
{
    memset(r, 0, sizeof *r);
    int64_t t0 = td_now_ns();
    uint64_t rng = o->seed * 6364136223846793005ULL + 1442695040888963407ULL;
    int fd = th_connect(h, NULL);
    ck_assert_int_ge(fd, 0);
    /* deterministic: a job killed before its first checkpoint starts
     * again in a new daemon, which would time its kernel choices anew
     * (docs/compute.md "Plan choices by measurement") */
    json_t *spec = th_spec(o->epochs, o->every, o->size, o->channels);
    json_object_set_new(spec, "deterministic", json_true());
    int64_t a = th_submit(fd, json_deep_copy(spec));
    close(fd);
    ck_assert_msg(td__wait_done(h, a, 600), "reference job did not complete");
    fd = th_connect(h, NULL);
    int64_t b = th_submit(fd, spec);
    close(fd);
    char dir_a[256], dir_b[256];
    snprintf(dir_a, sizeof dir_a, "%s/checkpoints/%" PRId64, h->state, a);
    snprintf(dir_b, sizeof dir_b, "%s/checkpoints/%" PRId64, h->state, b);
    for (int c = 0; c < o->cycles; c++) {
        int in_write = c % 2 == 1;
        int writing = 0;
        int64_t before = -1, deadline = td_now_ns() + 60 * TD_NS_PER_S;
        /* Wait until B trains in this daemon's life (or has ended). */
        fd = th_connect(h, NULL);
        json_t *j0 = th__show(fd, b);
        int ended = strcmp(json_string_value(json_object_get(j0, "state")),
                           "completed") == 0;
        json_decref(j0);
        if (!ended)
            ck_assert_msg(th_wait_state(fd, b, "running", 60000),
                          "cycle %d: job not running", c);
        close(fd);
        if (ended)
            break;
        /* Progress first: a checkpoint newer than the one this life
         * resumed from, so every kill below has something to lose. */
        int64_t resumed = td__newest(dir_b, NULL);
        while (td_now_ns() < deadline && td__newest(dir_b, NULL) <= resumed)
            usleep(1000);
        if (in_write) {
            /* Poll for the next checkpoint being written, then kill. */
            while (td_now_ns() < deadline) {
                before = td__newest(dir_b, &writing);
                if (writing)
                    break;
                usleep(200);
            }
        } else {
            rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
            usleep((useconds_t)((rng >> 33) % 400000));
            before = td__newest(dir_b, &writing);
        }
        fd = th_connect(h, NULL);
        json_t *j = th__show(fd, b);
        const char *st = json_string_value(json_object_get(j, "state"));
        int done = st && strcmp(st, "completed") == 0;
        json_decref(j);
        close(fd);
        if (done)
            break; /* finished before the kill: nothing left to break */
        td__kill9(h);
        r->kills++;
        if (writing)
            r->kills_in_write++;
        else
            r->kills_random++;
        int64_t after = td__newest_valid(dir_b);
        if (before >= 0 && after < before)
            r->lost++;
        if (o->verbose)
            printf("cycle %2d: kill -9 %s; newest complete before %" PRId64
                   ", newest valid after %" PRId64 "\n", c + 1,
                   writing ? "during a checkpoint write" : "at a random moment",
                   before, after);
        ck_assert_int_eq(th_restart(h), 0);
        if (after >= 0)
            r->resumes++;
    }
    r->completed = td__wait_done(h, b, 900);
    int64_t sa, sb;
    td_ckpt_file *fa = td__final(dir_a, &sa), *fb = td__final(dir_b, &sb);
    r->final_step = sb;
    if (fa && fb && sa == sb &&
        td_ckpt_file_count(fa) == td_ckpt_file_count(fb)) {
        for (int i = 0; i < td_ckpt_file_count(fa); i++) {
            const td_ckpt_tensor *t = td_ckpt_file_tensor(fa, i);
            char err[256];
            void *x = malloc(t->nbytes), *y = malloc(t->nbytes);
            r->tensors++;
            if (!x || !y ||
                td_ckpt_file_read(fa, t->name, t->dtype, x, t->nbytes, err,
                                  sizeof err) ||
                td_ckpt_file_read(fb, t->name, t->dtype, y, t->nbytes, err,
                                  sizeof err) ||
                memcmp(x, y, t->nbytes) != 0)
                r->differing++;
            free(x);
            free(y);
        }
    } else {
        r->differing = -1; /* not comparable */
    }
    td_ckpt_close(fa);
    td_ckpt_close(fb);
    r->seconds = (double)(td_now_ns() - t0) / 1e9;
}
