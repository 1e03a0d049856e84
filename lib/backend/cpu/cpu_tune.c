/* cpu_tune.c - the bf16 plan's kernel choices by measurement, and as
 * text a checkpoint keeps.
 *
 * A convolution of the bf16 plan has two choices, each between two
 * kernels that compute the same products in another order: its backward
 * weights (oneDNN's primitive, or cpu_bwdw.c) and its backward data
 * (oneDNN's primitive, or forward convolution(s) of dy: cpu_bwdd.c for
 * stride 1, cpu_bwdd2.c for stride 2).  The fixed rules pick by what was
 * measured on one CPU kind; with cfg.plan TD_PLAN_MEASURE, td__cpu_tune
 * times both kernels of every choice on this machine and keeps the
 * faster.  Times are taken inside whole steps (forward, loss, backward,
 * no update, on a synthetic batch), where each kernel finds the caches
 * and threads as training leaves them: a kernel timed alone, called
 * again and again, measured up to 2x off its time in a step.  Two plans
 * alternate, so that a load that comes and goes on a shared machine hits
 * both alike:
 *   A  the fixed rules' plan;
 *   B  every choice turned the other way (an environment switch
 *      TD_CPU_BWDW, TD_CPU_BWDD or TD_CPU_BWDD2 that forces a choice
 *      keeps it; a kernel that does not apply, by layout or shape, stays
 *      as it was);
 * each planned in turn (TD__ROUNDS times), a warm-up step and TD__PASSES
 * timed steps per turn (fewer for a model whose step is long; none past
 * TD__SKIP_NS).  Convolutions of one shape (resnet's repeated blocks)
 * share one decision, on the sum of their times: per shape and choice,
 * per round the ratio of the two kernels' best steps (other / rule), and
 * the other kernel where the median of the rounds' ratios is below
 * TD__MARGIN; then the plan made again with that.  The times are kept for the
 * life of the process per shape, layout, batch, threads and choice, so
 * the next job of the same shapes plans at once, with the same choices.
 * Parameters, optimizer state and statistics are the host arrays and
 * survive the plans; the steps have no update, and the running
 * statistics, the step counter and the loss counters they touch are put
 * back after.
 *
 * The choices as text (td__cpu_plan_get; bf16 plans only, -ENOTSUP for
 * fp32): "v1 <layout> <one character per layer>", the layout "nhwc",
 * "nChw16c" or "any" (oneDNN's choice per layer), a
 * convolution's character the digit of its TD__CH_* bits, '.' for other
 * layers.  td__cpu_plan_set plans again with such text (a resumed job
 * computes with the choices its first run measured).
 *
 * Never does: decide a layer's kernels itself (td__choice in the plan
 * files reads be->choice), log anything but a summary (and, at debug
 * level, each shape's times).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_int.h"
#include "base/clock.h"
#include "base/log.h"

#define TD__MARGIN 0.92 /* the other kernel must be 8 % faster */
#define TD__ROUNDS 3
#define TD__PASSES 2
#define TD__LONG_NS 1000000000LL  /* steps of 1 s or more: 1 round, 1 pass */
#define TD__SKIP_NS 20000000000LL /* of 20 s or more: no measurement */
#define TD__CACHE 256

enum { TD__P_BWDW = 0, TD__P_BWDD = 1 };

/* One shape and choice: what the times of its layers depend on. */
typedef struct td__key {
    int piece, rule;     /* TD__P_*, the fixed rule's kernel (0 oneDNN) */
    int atag, threads, batch;
    int ic, oc, k, stride, pad, ih, iw;
} td__key;

/* What was measured for one key. */
typedef struct td__times {
    int64_t ns[2]; /* best step's time of kernel 0 and 1 (INT64_MAX: not
                      timed) */
    double ratio;  /* median over rounds of other / rule; 0: none */
} td__times;

static struct {
    pthread_mutex_t mu;
    int n;
    td__key key[TD__CACHE];
    td__times t[TD__CACHE];
} td__cache = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void td__make_key(const td__cpu *be, int L, int piece, int rule,
                         td__key *k)
{
    const td_model *m = be->base.model;
    const td_layer *l = &m->layers[L];
    const td_shape in = m->layers[l->in[0]].out;
    memset(k, 0, sizeof *k); /* keys compare with memcmp */
    *k = (td__key){piece, rule, (int)be->atag, be->threads, be->batch,
                   in.c, l->channels, l->kernel, l->stride, l->pad, in.h,
                   in.w};
}

/* 1 with *out filled when the cache holds the key. */
static int td__cache_get(const td__key *k, td__times *out)
{
    int found = 0;
    pthread_mutex_lock(&td__cache.mu);
    for (int i = 0; i < td__cache.n && !found; i++)
        if (memcmp(&td__cache.key[i], k, sizeof *k) == 0) {
            *out = td__cache.t[i];
            found = 1;
        }
    pthread_mutex_unlock(&td__cache.mu);
    return found;
}

static void td__cache_put(const td__key *k, const td__times *t)
{
    td__times old;
    if (td__cache_get(k, &old))
        return;
    pthread_mutex_lock(&td__cache.mu);
    if (td__cache.n < TD__CACHE) {
        td__cache.key[td__cache.n] = *k;
        td__cache.t[td__cache.n++] = *t;
    }
    pthread_mutex_unlock(&td__cache.mu);
}

static int td__is_conv(const td__cpu *be, int L)
{
    return be->base.model->layers[L].kind == TD_L_CONV &&
           be->cl[L].root == L;
}

static int td__replan(td__cpu *be)
{
    td__cpu_unplan(be);
    int rc = td__cpu_plan(be);
    be->weights_dirty = 1;
    return rc;
}

/* A kernel's name for the debug log. */
static const char *td__kernel_name(int stride, int piece, int kernel)
{
    if (!kernel)
        return "oneDNN";
    if (piece == TD__P_BWDW)
        return "cpu_bwdw";
    return stride == 2 ? "four phases" : "forward conv";
}

/* The measurement's state: the model's shapes (keys), which of them each
 * layer's choices belong to, what was measured per key, and the round's
 * best step per key and kernel with the ratios of the rounds so far. */
typedef struct td__tune {
    int nkeys;
    td__key *keys;
    int *of;            /* [2L + p]: key index, or -1 (no choice) */
    td__times *got;     /* per key */
    int64_t (*best)[2]; /* this round's, INT64_MAX: not timed */
    double *ratios;     /* [k * TD__ROUNDS + r] */
    int *nratios;       /* per key */
    uint8_t *rule, *other;
} td__tune;

static void td__round_start(td__tune *t)
{
    for (int k = 0; k < t->nkeys; k++)
        t->best[k][0] = t->best[k][1] = INT64_MAX;
}

/* A round's ratio per key where both kernels were timed in it. */
static void td__round_end(td__tune *t)
{
    for (int k = 0; k < t->nkeys; k++) {
        int rule = t->keys[k].rule;
        if (t->best[k][0] != INT64_MAX && t->best[k][1] != INT64_MAX &&
            t->nratios[k] < TD__ROUNDS)
            t->ratios[k * TD__ROUNDS + t->nratios[k]++] =
                (double)t->best[k][!rule] / (double)t->best[k][rule];
    }
}

static int td__cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The rounds' median ratio per key into got (0 without any). */
static void td__medians(td__tune *t)
{
    for (int k = 0; k < t->nkeys; k++) {
        double *r = &t->ratios[k * TD__ROUNDS];
        int n = t->nratios[k];
        qsort(r, (size_t)n, sizeof *r, td__cmpd);
        t->got[k].ratio = n == 0       ? 0
                          : n % 2 == 1 ? r[n / 2]
                                       : (r[n / 2 - 1] + r[n / 2]) / 2;
    }
}

/* One step's times per key, summed over its layers, into best (the
 * round's) and got (the lowest of all). */
static void td__take(td__cpu *be, td__tune *t)
{
    int n = be->base.model->nlayers;
    int64_t *sum = calloc((size_t)t->nkeys, sizeof *sum);
    int *kern = calloc((size_t)t->nkeys, sizeof *kern);
    if (!sum || !kern) {
        free(sum);
        free(kern);
        return;
    }
    for (int L = 1; L < n; L++)
        for (int p = 0; p < 2; p++) {
            int k = t->of[2 * L + p];
            if (k < 0)
                continue;
            sum[k] += be->prof[2 * L + p];
            kern[k] = (td__choice_taken(be, L) >> p) & 1;
        }
    for (int k = 0; k < t->nkeys; k++) {
        if (sum[k] < t->best[k][kern[k]])
            t->best[k][kern[k]] = sum[k];
        if (sum[k] < t->got[k].ns[kern[k]])
            t->got[k].ns[kern[k]] = sum[k];
    }
    free(sum);
    free(kern);
}

/* Steps without an update on the uploaded synthetic batch: `warm`
 * untimed, then `passes` timed into t; *step_ns the last one's time. */
static int td__steps(td__cpu *be, td__tune *t, int warm, int passes,
                     int64_t *step_ns)
{
    int rc;
    for (int i = 0; i < warm + passes; i++) {
        int64_t t0 = td_now_ns();
        if ((rc = be->base.ops->train_step(&be->base, 0.0f, 1)))
            return rc;
        *step_ns = td_now_ns() - t0;
        if (i >= warm)
            td__take(be, t);
    }
    return 0;
}

/* The keys of the model's choices, with the rule's kernels. */
static int td__keys(td__cpu *be, td__tune *t)
{
    int n = be->base.model->nlayers;
    t->keys = calloc((size_t)(2 * n), sizeof *t->keys);
    t->of = malloc((size_t)(2 * n) * sizeof *t->of);
    t->best = malloc((size_t)(2 * n) * sizeof *t->best);
    t->got = malloc((size_t)(2 * n) * sizeof *t->got);
    t->ratios = malloc((size_t)(2 * n * TD__ROUNDS) * sizeof *t->ratios);
    t->nratios = calloc((size_t)(2 * n), sizeof *t->nratios);
    t->rule = calloc((size_t)n, 1);
    t->other = calloc((size_t)n, 1);
    if (!t->keys || !t->of || !t->best || !t->got || !t->ratios ||
        !t->nratios || !t->rule || !t->other)
        return -ENOMEM;
    for (int L = 0; L < n; L++) {
        t->of[2 * L] = t->of[2 * L + 1] = -1;
        if (L == 0 || !td__is_conv(be, L))
            continue;
        t->rule[L] = t->other[L] = (uint8_t)td__choice_taken(be, L);
        for (int p = 0; p < 2; p++) {
            td__key k;
            int i;
            if (td__choice_forced(be, L, 1 << p) || (p && be->cl[L].no_dsrc))
                continue;
            t->other[L] ^= (uint8_t)(1 << p);
            td__make_key(be, L, p, (t->rule[L] >> p) & 1, &k);
            for (i = 0; i < t->nkeys; i++)
                if (memcmp(&t->keys[i], &k, sizeof k) == 0)
                    break;
            if (i == t->nkeys)
                t->keys[t->nkeys++] = k;
            t->of[2 * L + p] = i;
        }
    }
    return 0;
}

/* A synthetic batch for the timed steps (pixels of a pattern, labels
 * 0..classes-1); the caller puts be->n back. */
static void td__batch(td__cpu *be)
{
    const td_shape in = be->base.model->layers[0].out;
    size_t np = (size_t)be->batch * in.c * in.h * in.w;
    for (size_t i = 0; i < np; i++)
        be->pixels[i] = (uint8_t)((i * 2654435761u) >> 24);
    for (int i = 0; i < be->batch; i++)
        be->labels[i] = i % be->base.model->classes;
    be->n = be->batch;
    be->layout = TD_LAYOUT_NHWC;
}

/* Both plans timed in turns (unless the cache holds every key), what was
 * measured per key into t->got.  *timed: steps timed.  1: not measured
 * (a step too long), the rules' plan planned. */
static int td__measure(td__cpu *be, td__tune *t, int *timed)
{
    int n = be->base.model->nlayers, rc = 0, cached = 1;
    for (int k = 0; k < t->nkeys; k++)
        cached &= td__cache_get(&t->keys[k], &t->got[k]);
    if (!cached) {
        size_t sc = td_model_state_count(be->base.model);
        float *state = malloc((sc ? sc : 1) * sizeof(float));
        int64_t *prof = calloc((size_t)(2 * n), sizeof *prof);
        td_step_stats acc = be->acc;
        int64_t step = be->step, step_ns = 0;
        int nb = be->n;
        enum td_layout ly = be->layout;
        if (!state || !prof) {
            free(state);
            free(prof);
            return -ENOMEM;
        }
        memcpy(state, be->state, sc * sizeof(float));
        for (int k = 0; k < t->nkeys; k++)
            t->got[k] = (td__times){{INT64_MAX, INT64_MAX}, 0};
        td_info("cpu backend: timing %d kernel choice%s (per convolution "
                "shape and gradient): two plans in turns, a few steps each",
                t->nkeys, t->nkeys == 1 ? "" : "s");
        td__batch(be);
        be->prof = prof;
        int rounds = TD__ROUNDS, passes = TD__PASSES;
        /* plan A is planned: a warm-up step says how long a step is */
        rc = td__steps(be, t, 1, 0, &step_ns);
        if (rc == 0 && step_ns >= TD__SKIP_NS) {
            td_info("cpu backend: plan not measured: a step takes %.1f s",
                    (double)step_ns / 1e9);
            rounds = 0;
        } else if (step_ns >= TD__LONG_NS) {
            rounds = passes = 1;
        }
        for (int r = 0; r < rounds && rc == 0; r++) {
            td__round_start(t);
            for (int plan = 0; plan < 2 && rc == 0; plan++) {
                int first = r == 0 && plan == 0; /* planned and warm */
                memcpy(be->choice, plan ? t->other : t->rule, (size_t)n);
                be->choice_set = 1;
                if (!first)
                    rc = td__replan(be);
                if (rc == 0)
                    rc = td__steps(be, t, !first, passes, &step_ns);
                *timed += passes;
            }
            td__round_end(t);
        }
        td__medians(t);
        be->prof = NULL;
        free(prof);
        memcpy(be->state, state, sc * sizeof(float));
        free(state);
        be->acc = acc;
        be->step = step;
        be->n = nb;
        be->layout = ly;
        if (rc || rounds == 0)
            return rc ? rc : 1;
        for (int k = 0; k < t->nkeys; k++)
            td__cache_put(&t->keys[k], &t->got[k]);
    }
    return 0;
}

int td__cpu_tune(td__cpu *be)
{
    const td_model *m = be->base.model;
    int n = m->nlayers, rc, timed = 0, changed = 0, convs = 0;
    td__tune t = {0};
    if (be->base.cfg.plan != TD_PLAN_MEASURE || !td__is_bf16(be))
        return 0;
    int64_t t0 = td_now_ns();
    if ((rc = td__keys(be, &t)))
        goto out;
    if (t.nkeys == 0)
        goto out; /* nothing to choose */
    if ((rc = td__measure(be, &t, &timed))) {
        rc = rc == 1 ? 0 : rc; /* not measured: the rules' plan stays */
        goto out;
    }
    /* per key the faster kernel (the rule's unless clearly slower) */
    int *take = calloc((size_t)(t.nkeys > 0 ? t.nkeys : 1), sizeof *take);
    if (!take) {
        rc = -ENOMEM;
        goto out;
    }
    for (int k = 0; k < t.nkeys; k++) {
        const td__key *key = &t.keys[k];
        int64_t tr = t.got[k].ns[key->rule], to = t.got[k].ns[!key->rule];
        double ratio = t.got[k].ratio;
        take[k] = ratio > 0 && ratio < TD__MARGIN;
        if (ratio > 0)
            td_debug("cpu backend: %dx%dx%d -> %d, %dx%d stride %d, %s: "
                     "%s %.3f ms, %s %.3f ms per step (best), median "
                     "ratio %.3f: %s", key->ic, key->ih, key->iw, key->oc,
                     key->k, key->k, key->stride,
                     key->piece ? "bwd data" : "bwd weights",
                     td__kernel_name(key->stride, key->piece, key->rule),
                     (double)tr / 1e6,
                     td__kernel_name(key->stride, key->piece, !key->rule),
                     (double)to / 1e6, ratio,
                     take[k] ? "the other" : "the rule's");
    }
    for (int L = 1; L < n; L++) {
        uint8_t want = t.rule[L];
        for (int p = 0; p < 2; p++) {
            int k = t.of[2 * L + p];
            if (k >= 0 && take[k])
                want ^= (uint8_t)(1 << p);
        }
        convs += td__is_conv(be, L);
        changed += want != t.rule[L];
        be->choice[L] = want;
    }
    free(take);
    be->choice_set = 1;
    /* plan again unless the current plan is the one wanted */
    int same = 1;
    for (int L = 1; L < n && same; L++)
        same = !td__is_conv(be, L) ||
               td__choice_taken(be, L) == be->choice[L];
    if (!same && (rc = td__replan(be)))
        goto out;
    char text[1024];
    if (td__cpu_plan_get(&be->base, text, sizeof text))
        snprintf(text, sizeof text, "(%d layers)", n);
    td_info("cpu backend: plan measured in %.2f s (%d steps timed%s): %d "
            "of %d convolutions away from the fixed rules: %s",
            (double)(td_now_ns() - t0) / 1e9, timed,
            timed ? "" : ", the times from earlier in this process",
            changed, convs, text);
out:
    free(t.keys);
    free(t.of);
    free(t.best);
    free(t.got);
    free(t.ratios);
    free(t.nratios);
    free(t.rule);
    free(t.other);
    return rc;
}

static const char *td__layout_name(const td__cpu *be)
{
    return be->atag == dnnl_nhwc      ? "nhwc"
           : be->atag == dnnl_nChw16c ? "nChw16c"
                                      : "any";
}

int td__cpu_plan_get(td_backend *b, char *out, size_t cap)
{
    td__cpu *be = td__be(b);
    int n = b->model->nlayers;
    if (!td__is_bf16(be))
        return -ENOTSUP; /* an fp32 plan has no choices to record */
    int w = snprintf(out, cap, "v1 %s ", td__layout_name(be));
    if (w < 0 || (size_t)w + (size_t)n + 1 > cap)
        return -ENOSPC;
    for (int L = 0; L < n; L++)
        out[w + L] = td__is_conv(be, L) && L > 0
                         ? (char)('0' + td__choice_taken(be, L))
                         : '.';
    out[w + n] = '\0';
    return 0;
}

int td__cpu_plan_set(td_backend *b, const char *choices)
{
    td__cpu *be = td__be(b);
    const td_model *m = b->model;
    int n = m->nlayers, rc;
    char layout[16], now[1024];
    const char *sp;
    if (!td__is_bf16(be)) {
        snprintf(b->err, sizeof b->err, "plan choices: an fp32 plan has "
                 "none (only bf16 plans choose kernels)");
        return -ENOTSUP;
    }
    if (sscanf(choices, "v1 %15s", layout) != 1 ||
        !(sp = strchr(choices + 3, ' '))) {
        snprintf(b->err, sizeof b->err, "plan choices \"%.40s\": not "
                 "\"v1 <layout> <one character per layer>\"", choices);
        return -EINVAL;
    }
    const char *c = sp + 1;
    if (strcmp(layout, td__layout_name(be)) != 0) {
        snprintf(b->err, sizeof b->err, "plan choices for the %s layout; "
                 "this CPU's plan lays activations out as %s", layout,
                 td__layout_name(be));
        return -EINVAL;
    }
    if ((int)strlen(c) != n) {
        snprintf(b->err, sizeof b->err, "plan choices for %zu layers; the "
                 "model has %d", strlen(c), n);
        return -EINVAL;
    }
    for (int L = 0; L < n; L++) {
        int conv = L > 0 && td__is_conv(be, L);
        if (conv ? c[L] < '0' || c[L] > '3' : c[L] != '.') {
            snprintf(b->err, sizeof b->err, "plan choices: layer %d (%s) "
                     "has '%c', expected %s", L, m->layers[L].name, c[L],
                     conv ? "0..3 (a convolution)" : "'.'");
            return -EINVAL;
        }
    }
    if ((rc = td__cpu_plan_get(b, now, sizeof now)) == 0 &&
        strcmp(now, choices) == 0)
        return 0; /* planned so already */
    for (int L = 0; L < n; L++)
        be->choice[L] = c[L] == '.' ? 0 : (uint8_t)(c[L] - '0');
    be->choice_set = 1;
    if ((rc = td__replan(be)))
        return rc;
    if ((rc = td__cpu_plan_get(b, now, sizeof now)))
        return rc;
    if (strcmp(now, choices) != 0) {
        snprintf(b->err, sizeof b->err, "plan choices %.80s cannot all be "
                 "made here (an environment switch or another CPU); "
                 "planned %.80s", choices, now);
        return -EINVAL;
    }
    return 0;
}
