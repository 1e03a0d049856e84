/* sim_testkit.c - the simulated device's numeric suites' common setup
 * (see sim_testkit.h). */
#include "sim_testkit.h"

#include <check.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/rng.h"
#include "sim.h"

td_backend_config st_config(int batch, enum td_dtype dt,
                            enum td_fp32_math math)
{
    td_backend_config c;
    memset(&c, 0, sizeof c);
    c.batch = batch;
    c.threads = 1;
    c.dtype = dt;
    c.fp32_math = math;
    for (int i = 0; i < 4; i++)
        c.mean[i] = 0.45f, c.std[i] = 0.25f;
    c.seed = 17;
    td_optim_defaults(&c.optim, TD_OPT_SGD);
    c.optim.lr = ST_LR;
    return c;
}

void st_batch_fill(st_batch *b, const td_model *m, int n, uint64_t salt)
{
    td_shape in = m->layers[0].out;
    size_t per = (size_t)in.c * in.h * in.w;
    size_t cw = (size_t)in.w * (b->pixel_rows ? (size_t)in.c : 1);
    if (!b->px) {
        b->px = malloc(per * (size_t)n);
        b->labels = malloc(sizeof *b->labels * (size_t)n);
        ck_assert(b->px && b->labels);
    }
    for (int i = 0; i < n; i++) {
        int k = (int)td_rng_below(salt, 2, (uint64_t)i, (uint64_t)m->classes);
        b->labels[i] = k;
        for (size_t e = 0; e < per; e++) {
            int row = (int)(e / cw % (size_t)in.h);
            int band = row * m->classes / in.h == k;
            size_t at = (size_t)i * per + e;
            b->px[at] = (uint8_t)(td_rng_below(salt, 1, at, 96) +
                                  (band ? 150 : 0));
        }
    }
    b->b = (td_batch){.data = b->px, .labels = b->labels, .n = n, .h = in.h,
                      .w = in.w, .c = in.c, .layout = TD_LAYOUT_NHWC};
}

void st_batch_free(st_batch *b)
{
    free(b->px);
    free(b->labels);
    b->px = NULL;
    b->labels = NULL;
}

td_backend *st_make(const char *kind, const td_model *m,
                    const td_backend_config *c)
{
    char err[512] = "";
    td_backend *be = NULL;
    int rc = td_backend_create(kind, m, c, &be, err, sizeof err);
    ck_assert_msg(rc == 0, "%s %s: %s", kind, st_dt_name(c->dtype), err);
    return be;
}

double st_step(td_backend *be, const td_model *m, st_batch *b, int n,
               uint64_t salt, float lr, int64_t t)
{
    td_step_stats st;
    st_batch_fill(b, m, n, salt);
    ck_assert_int_eq(td_backend_upload(be, &b->b), 0);
    ck_assert_msg(td_backend_train_step(be, lr, t) == 0, "%s", be->err);
    ck_assert_int_eq(td_backend_read_stats(be, &st), 0);
    ck_assert_int_eq(td_backend_sync(be), 0);
    ck_assert_int_eq(st.samples, n);
    return st.loss_sum / (double)st.samples;
}

double st_eval(td_backend *be, const td_model *m, st_batch *b, int n,
               uint64_t salt)
{
    td_step_stats st;
    st_batch_fill(b, m, n, salt);
    ck_assert_int_eq(td_backend_upload(be, &b->b), 0);
    ck_assert_msg(td_backend_eval_step(be) == 0, "%s", be->err);
    ck_assert_int_eq(td_backend_read_stats(be, &st), 0);
    ck_assert_int_eq(td_backend_sync(be), 0);
    return st.loss_sum / (double)st.samples;
}

td_backend *st_resume_across(const td_model *m, const td_backend_config *cf,
                             const td_backend_config *ct, st_batch *b, int n,
                             int steps, float lr, double ev[3])
{
    td_backend *a = st_make("cuda:0", m, cf), *b2 = st_make("cuda:0", m, ct);
    ev[0] = st_eval(b2, m, b, n, 900);
    for (int s = 0; s < steps; s++)
        st_step(a, m, b, n, 100 + (uint64_t)s, lr, s + 1);
    ev[1] = st_eval(a, m, b, n, 900);
    size_t k = td_backend_snapshot_floats(m, &cf->optim);
    float *s1 = malloc(k * sizeof *s1), *s2 = malloc(k * sizeof *s2);
    ck_assert(s1 && s2);
    ck_assert_int_eq(td_backend_snapshot(a, s1, k), 0);
    ck_assert_int_eq(td_backend_sync(a), 0);
    ck_assert_msg(td_backend_restore(b2, s1, k) == 0, "%s", b2->err);
    ck_assert_int_eq(td_backend_snapshot(b2, s2, k), 0);
    ck_assert_int_eq(td_backend_sync(b2), 0);
    ck_assert_int_eq(memcmp(s1, s2, k * sizeof *s1), 0);
    ev[2] = st_eval(b2, m, b, n, 900);
    free(s1);
    free(s2);
    td_backend_destroy(a);
    return b2;
}

td_backend *st_resume_check(const td_model *m, enum td_dtype from,
                            enum td_dtype to, int n, float lr, st_batch *b,
                            double tol, double moved, const char *tag,
                            const char *verbose_env)
{
    td_backend_config cf = st_config(n, from, TD_MATH_FP32);
    td_backend_config ct = st_config(n, to, TD_MATH_FP32);
    cf.optim.lr = ct.optim.lr = lr;
    double ev[3];
    td_backend *b2 = st_resume_across(m, &cf, &ct, b, n, n, lr, ev);
    double init = ev[0], ea = ev[1], eb = ev[2];
    if (!verbose_env || st_verbose(verbose_env))
        printf("%s%s -> %s: eval loss initial %.6f, before %.6f, after the "
               "restore %.6f\n", tag, st_dt_name(from), st_dt_name(to),
               init, ea, eb);
    ck_assert_msg(st_loss_err(eb, ea) <= tol, "%s -> %s: %.6f after, %.6f "
                  "before", st_dt_name(from), st_dt_name(to), eb, ea);
    ck_assert_msg(fabs(eb - init) > moved * fabs(eb - ea), "%s -> %s: the "
                  "loss did not move from the initial weights' (%.6f, "
                  "%.6f, %.6f)", st_dt_name(from), st_dt_name(to), init, ea,
                  eb);
    return b2;
}

void st_create_refused(const td_model *m, enum td_dtype dt,
                       enum td_fp32_math math, char *err, size_t n)
{
    td_backend *be = NULL;
    td_backend_config c = st_config(6, dt, math);
    ck_assert_int_eq(td_backend_create("cuda:0", m, &c, &be, err, n),
                     TD_E_NOTSUP);
    ck_assert_ptr_null(be);
    ck_assert_uint_eq(td_sim_used(0), 0);
}

size_t st_masks_compare(td_backend *ref, td_backend *be, int drop, int in,
                        size_t cnt, size_t *zeros, size_t *differ)
{
    float *a = malloc(cnt * sizeof *a), *g = malloc(cnt * sizeof *g);
    float *ai = malloc(cnt * sizeof *a), *gi = malloc(cnt * sizeof *g);
    ck_assert(a && g && ai && gi);
    ck_assert_int_eq(ref->ops->read_tensor(ref, TD_T_VALUE, drop, a, cnt), 0);
    ck_assert_int_eq(be->ops->read_tensor(be, TD_T_VALUE, drop, g, cnt), 0);
    ck_assert_int_eq(ref->ops->read_tensor(ref, TD_T_VALUE, in, ai, cnt), 0);
    ck_assert_int_eq(be->ops->read_tensor(be, TD_T_VALUE, in, gi, cnt), 0);
    size_t seen = 0;
    for (size_t i = 0; i < cnt; i++) {
        if (ai[i] == 0.0f || gi[i] == 0.0f)
            continue;
        seen++;
        *zeros += a[i] == 0.0f;
        *differ += (a[i] == 0.0f) != (g[i] == 0.0f);
    }
    free(a);
    free(g);
    free(ai);
    free(gi);
    return seen;
}

void st_get(void *host, const void *d, size_t bytes)
{
    ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
    ck_assert_int_eq(cudaMemcpy(host, d, bytes, cudaMemcpyDeviceToHost),
                     cudaSuccess);
}

double st_rel_diff(const float *a, const float *b, size_t n)
{
    double big = 0, diff = 0;
    for (size_t i = 0; i < n; i++) {
        big = fmax(big, fabs(b[i]));
        diff = fmax(diff, fabs((double)a[i] - b[i]));
    }
    return diff / fmax(big, 1e-30);
}

double st_loss_err(double a, double b)
{
    return fabs(a - b) / fmax(fabs(b), 1.0);
}

const char *st_dt_name(enum td_dtype dt)
{
    return dt == TD_BF16 ? "bf16" : dt == TD_F16 ? "fp16" : "fp32";
}

void st_sim_env(const char *name, const char *value)
{
    setenv(name, value, 1);
    ck_assert_int_eq(td_sim_reset(), 0);
}

int st_verbose(const char *name)
{
    fflush(stdout);
    return getenv(name) != NULL;
}
