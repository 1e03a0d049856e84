/* cpu_tune.c - the bf16 plan's choices by measurement, and as text a
 * checkpoint keeps.
 *
 * The bf16 plan has choices of two kinds.  Whole-plan choices, each
 * between two plans of the same products:
 *   layout      the activations channels-last (nhwc) or blocked
 *               (nChw16c); the rule takes the one a typical convolution
 *               prefers (cpu_plan.c), the other is the choice;
 *   batch norm  cpu_bn.c's kernels (the rule, where they apply) or
 *               oneDNN's primitives, for every batch norm at once.
 * And per convolution two kernel choices, each between two kernels that
 * compute the same products in another order: its backward weights
 * (oneDNN's primitive, or cpu_bwdw.c) and its backward data (oneDNN's
 * primitive, or forward convolution(s) of dy: cpu_bwdd.c for stride 1,
 * cpu_bwdd2.c for stride 2).  The fixed rules pick by what was measured
 * on one CPU kind; with cfg.plan TD_PLAN_MEASURE, td__cpu_tune times
 * both sides of every choice on this machine and keeps the faster.
 * Times are taken inside whole steps (forward, loss, backward, no
 * update, on a synthetic batch), where each kernel finds the caches and
 * threads as training leaves them: a kernel timed alone, called again
 * and again, measured up to 2x off its time in a step.  Two plans
 * alternate, so that a load that comes and goes on a shared machine hits
 * both alike, TD__ROUNDS rounds of a warm-up step and TD__PASSES timed
 * steps per plan (fewer for a model whose step is long; none past
 * TD__SKIP_NS).  In order:
 *   1. the layout: the rule's plan against the other layout's (each with
 *      its own rules for the rest); the other where the median over
 *      rounds of its best step over the rule's is below TD__STEP_MARGIN
 *      (a first round where the other is TD__CLEAR times slower decides
 *      alone, and two rounds on one side of the margin decide what a
 *      third's median would; so for the kernels);
 *   2. in that layout, the batch norms the same way;
 *   3. in that plan, the kernels: plan A the rules' kernels, plan B every
 *      choice turned the other way (an environment switch TD_CPU_BWDW,
 *      TD_CPU_BWDD or TD_CPU_BWDD2 that forces a choice keeps it; a
 *      kernel that does not apply, by layout or shape, stays as it was).
 *      Each convolution's two pieces are timed inside the step
 *      (be->prof); convolutions of one shape (resnet's repeated blocks)
 *      share one decision, on the sum of their times: per round the
 *      ratio of the two kernels' best steps (other / rule), and the other
 *      kernel where the median of the rounds' ratios is below TD__MARGIN.
 * An environment switch that forces a whole-plan choice (TD_CPU_NHWC,
 * TD_CPU_BN=onednn) skips its measurement.  What was measured is kept
 * for the life of the process (per model, layout, batch, threads; per
 * shape and choice for the kernels), so the next job of the same shapes
 * plans at once, with the same choices.  Parameters, optimizer state and
 * statistics are the host arrays and survive the plans; the steps have
 * no update, and the running statistics, the step counter and the loss
 * counters they touch are put back after.
 *
 * The choices as text (td__cpu_plan_get; bf16 plans only, -ENOTSUP for
 * fp32): "v2 <layout> <one character per layer>", the layout "nhwc",
 * "nChw16c" or "any" (oneDNN's choice per layer); a convolution's
 * character the digit of its TD__CH_* bits, a batch norm's 'h' (cpu_bn.c)
 * or 'o' (oneDNN's; '.' where cpu_bn.c's cannot run), '.' for other
 * layers.  td__cpu_plan_set plans again with such text (a resumed job
 * computes with the choices its first run measured); it also takes the
 * "v1" text of before (the same, with '.' for every batch norm: the
 * rule's kernel).
 *
 * Never does: decide a layer's kernels itself (td__choice in the plan
 * files reads be->choice, td__plan_input_md be->layout_pick), log
 * anything but a summary (and, at debug level, each choice's times).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_int.h"
#include "base/clock.h"
#include "base/log.h"

#define TD__MARGIN 0.92      /* the other kernel must be 8 % faster */
#define TD__STEP_MARGIN 0.95 /* the other whole plan 5 % faster */
#define TD__CLEAR 1.3        /* a first round with the other this much
                                slower decides */
#define TD__ROUNDS 3
#define TD__PASSES 2
#define TD__LONG_NS 1000000000LL  /* steps of 1 s or more: 1 round, 1 pass */
#define TD__SKIP_NS 20000000000LL /* of 20 s or more: no measurement */
#define TD__CACHE 256

/* An info line of the job the backend plans for (its log, its watchers:
 * the measurement's progress). */
#define TD__INFO(be, ...)                                                    \
    td_logf(TD_LOG_INFO, (be)->base.cfg.log_job, __VA_ARGS__)

enum { TD__P_BWDW = 0, TD__P_BWDD = 1, TD__P_LAYOUT = 2, TD__P_BN = 3 };

/* One choice: what its times depend on.  A kernel's: its shape; a
 * whole-plan choice's: the model (a hash of its layers). */
typedef struct td__key {
    int piece, rule;     /* TD__P_*, the fixed rule's side (0 oneDNN's
                            kernel; the rule's layout, TD__LY_*) */
    int atag, threads, batch;
    int ic, oc, k, stride, pad, ih, iw;
    uint32_t model;      /* 0 for a kernel */
} td__key;

/* What was measured for one key. */
typedef struct td__times {
    int64_t ns[2]; /* best step's time of side 0 and 1 (INT64_MAX: not
                      timed); a kernel's in the step, a plan's the step */
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
                   in.w, 0};
}

/* A whole-plan choice's key: the model's layers (FNV-1a over what their
 * times depend on), batch, threads, and the layout it is made in. */
static void td__make_plan_key(const td__cpu *be, int piece, int rule,
                              td__key *k)
{
    const td_model *m = be->base.model;
    uint32_t h = 2166136261u;
    for (int L = 0; L < m->nlayers; L++) {
        const td_layer *l = &m->layers[L];
        int v[12] = {(int)l->kind, l->in[0],    l->in[1], l->out.c,
                     l->out.h,     l->out.w,    l->kernel, l->stride,
                     l->pad,       l->channels, l->bias,
                     l->kind == TD_L_BN && td__bn_eval(be, L)};
        for (size_t i = 0; i < sizeof v; i++) {
            h ^= ((const unsigned char *)v)[i];
            h *= 16777619u;
        }
    }
    memset(k, 0, sizeof *k);
    *k = (td__key){piece, rule, piece == TD__P_LAYOUT ? 0 : (int)be->atag,
                   be->threads, be->batch, 0, 0, 0, 0, 0, 0, 0, h ? h : 1};
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

static int td__cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double td__median(double *r, int n)
{
    qsort(r, (size_t)n, sizeof *r, td__cmpd);
    return n == 0 ? 0 : n % 2 == 1 ? r[n / 2] : (r[n / 2 - 1] + r[n / 2]) / 2;
}

/* The measurement's steps: what they touch is kept at open and put back
 * at close; the synthetic batch is uploaded once. */
typedef struct td__sess {
    int open, rounds, passes;
    int warm;        /* the current plan has run a step */
    int timed;       /* steps timed */
    float *state;
    int64_t *prof;
    td_step_stats acc;
    int64_t step;
    int n;
    enum td_layout ly;
} td__sess;

struct td__tune;
static void td__take(td__cpu *be, struct td__tune *t);

static int td__replan(td__cpu *be, td__sess *s)
{
    td__cpu_unplan(be);
    int rc = td__cpu_plan(be);
    be->weights_dirty = 1;
    if (s)
        s->warm = 0;
    return rc;
}

/* Steps without an update on the uploaded synthetic batch: a warm-up
 * when the plan has not run one, then `passes` timed (kernel pieces into
 * t unless NULL); *best_ns the fastest timed step (or the warm-up). */
static int td__steps(td__cpu *be, td__sess *s, struct td__tune *t,
                     int passes, int64_t *best_ns)
{
    int warm = !s->warm, rc;
    *best_ns = INT64_MAX;
    for (int i = 0; i < warm + passes; i++) {
        int64_t t0 = td_now_ns();
        if ((rc = be->base.ops->train_step(&be->base, 0.0f, 1)))
            return rc;
        int64_t ns = td_now_ns() - t0;
        s->warm = 1;
        if (i < warm) {
            if (passes == 0)
                *best_ns = ns;
            continue;
        }
        s->timed++;
        if (ns < *best_ns)
            *best_ns = ns;
        if (t)
            td__take(be, t);
    }
    return 0;
}

/* A synthetic batch for the timed steps (pixels of a pattern, labels
 * 0..classes-1). */
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

/* Opens the measurement (once): keeps what the steps touch, uploads the
 * batch, and runs a warm-up step in the current plan whose length sets
 * the rounds and passes.  1: a step too long to measure. */
static int td__sess_open(td__cpu *be, td__sess *s)
{
    if (s->open)
        return s->rounds ? 0 : 1;
    int n = be->base.model->nlayers;
    size_t sc = td_model_state_count(be->base.model);
    s->state = malloc((sc ? sc : 1) * sizeof(float));
    s->prof = calloc((size_t)(2 * n), sizeof *s->prof);
    if (!s->state || !s->prof) {
        free(s->state);
        free(s->prof);
        s->state = NULL;
        s->prof = NULL;
        return -ENOMEM;
    }
    memcpy(s->state, be->state, sc * sizeof(float));
    s->acc = be->acc;
    s->step = be->step;
    s->n = be->n;
    s->ly = be->layout;
    s->open = 1;
    td__batch(be);
    be->prof = s->prof;
    s->rounds = TD__ROUNDS;
    s->passes = TD__PASSES;
    int64_t ns;
    int rc = td__steps(be, s, NULL, 0, &ns);
    if (rc)
        return rc;
    if (ns >= TD__SKIP_NS) {
        TD__INFO(be, "cpu backend: plan not measured: a step takes %.1f s",
                 (double)ns / 1e9);
        s->rounds = 0;
        return 1;
    }
    if (ns >= TD__LONG_NS)
        s->rounds = s->passes = 1;
    return 0;
}

static void td__sess_close(td__cpu *be, td__sess *s)
{
    if (!s->open)
        return;
    be->prof = NULL;
    memcpy(be->state, s->state,
           td_model_state_count(be->base.model) * sizeof(float));
    be->acc = s->acc;
    be->step = s->step;
    be->n = s->n;
    be->layout = s->ly;
    free(s->state);
    free(s->prof);
    s->open = 0;
}

/* The layout other than the rule's (TD__LY_RULE: none). */
static int td__other_layout(int rule)
{
    return rule == TD__LY_NHWC    ? TD__LY_BLK16
           : rule == TD__LY_BLK16 ? TD__LY_NHWC
                                  : TD__LY_RULE;
}

static const char *td__ly_name(int ly)
{
    return ly == TD__LY_NHWC ? "nhwc" : ly == TD__LY_BLK16 ? "nChw16c"
                                                           : "any";
}

/* Whole-plan choice `piece` turned to its rule (alt 0) or the other. */
static void td__plan_side(td__cpu *be, int piece, int rule, int alt)
{
    if (piece == TD__P_LAYOUT) {
        be->layout_pick = alt ? td__other_layout(rule) : rule;
        return;
    }
    for (int L = 1; L < be->base.model->nlayers; L++)
        if (td__bn_can_fast(be, L))
            be->choice[L] = (uint8_t)((be->choice[L] & ~TD__CH_BNDNN) |
                                      (alt ? TD__CH_BNDNN : 0));
}

/* The other side of whole-plan choice `piece` failed to plan (say, a
 * layer oneDNN has only a reference kernel for in that layout): the
 * rule's planned again, and the other side cached as impossible
 * (ratio -1). */
static int td__cannot(td__cpu *be, td__sess *s, int piece, int rule,
                      const td__key *key, td__times *got)
{
    TD__INFO(be, "cpu backend: the %s%s cannot be planned here (%s); the "
             "rule's kept", piece == TD__P_LAYOUT
             ? td__ly_name(td__other_layout(rule)) : "oneDNN batch norms",
             piece == TD__P_LAYOUT ? " layout" : "", be->base.err);
    be->base.err[0] = '\0';
    td__plan_side(be, piece, rule, 0);
    got->ns[1] = INT64_MAX;
    got->ratio = -1;
    td__cache_put(key, got);
    return td__replan(be, s);
}

/* Whole-plan choice `piece`: the rule's plan (planned now) and the
 * other's in turns, whole steps timed; then the faster planned.  *other:
 * the other taken; *got what was measured (or the cache's). */
static int td__plan_choice(td__cpu *be, td__sess *s, int piece, int rule,
                           int *other, td__times *got)
{
    td__key key;
    double r[TD__ROUNDS];
    int nr = 0, rc = 0, measured = 0;
    td__make_plan_key(be, piece, rule, &key);
    *other = 0;
    if (!td__cache_get(&key, got)) {
        if ((rc = td__sess_open(be, s)))
            return rc; /* 1: not measured */
        *got = (td__times){{INT64_MAX, INT64_MAX}, 0};
        TD__INFO(be, "cpu backend: timing the %s: two plans in turns, a few "
                 "steps each", piece == TD__P_LAYOUT
                 ? "activation layout (nhwc against nChw16c)"
                 : "batch norms (hand-written against oneDNN's)");
        for (int round = 0; round < s->rounds && rc == 0; round++) {
            int64_t best[2] = {INT64_MAX, INT64_MAX};
            for (int alt = 0; alt < 2 && rc == 0; alt++) {
                if (round > 0 || alt > 0) { /* the first: planned */
                    td__plan_side(be, piece, rule, alt);
                    rc = td__replan(be, s);
                }
                if (rc && alt == 1 && round == 0)
                    return td__cannot(be, s, piece, rule, &key, got);
                if (rc == 0)
                    rc = td__steps(be, s, NULL, s->passes, &best[alt]);
                if (rc == 0 && best[alt] < got->ns[alt])
                    got->ns[alt] = best[alt];
            }
            if (rc)
                break;
            r[nr++] = (double)best[1] / (double)best[0];
            td_debug("cpu backend: %s round %d: %s %.3f ms, %s %.3f ms per "
                     "step (best)", piece == TD__P_LAYOUT ? "layout"
                     : "batch norm", round + 1, piece == TD__P_LAYOUT
                     ? td__ly_name(rule) : "hand-written",
                     (double)best[0] / 1e6, piece == TD__P_LAYOUT
                     ? td__ly_name(td__other_layout(rule)) : "oneDNN's",
                     (double)best[1] / 1e6);
            /* the rule stays on one round's word; two rounds on one
             * side of the margin decide what a third's median would */
            if ((round == 0 && r[0] >= TD__CLEAR) ||
                (nr == 2 && (r[0] < TD__STEP_MARGIN) ==
                                (r[1] < TD__STEP_MARGIN)))
                break;
        }
        if (rc)
            return rc;
        got->ratio = td__median(r, nr);
        td__cache_put(&key, got);
        measured = 1;
    }
    *other = got->ratio > 0 && got->ratio < TD__STEP_MARGIN;
    /* measured: the other's plan ran last; else the rule's is planned */
    if (measured ? !*other : *other) {
        td__plan_side(be, piece, rule, *other);
        rc = td__replan(be, s);
    }
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

/* The kernels' measurement: the model's shapes (keys), which of them
 * each layer's choices belong to, what was measured per key, and the
 * round's best step per key and kernel with the ratios of the rounds so
 * far. */
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

/* Every key has two rounds' ratios on one side of the margin. */
static int td__agreed(const td__tune *t)
{
    for (int k = 0; k < t->nkeys; k++) {
        const double *r = &t->ratios[k * TD__ROUNDS];
        if (t->nratios[k] != 2 || (r[0] < TD__MARGIN) != (r[1] < TD__MARGIN))
            return 0;
    }
    return 1;
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

/* The keys of the model's kernel choices, with the rule's kernels; rule
 * and other keep every layer's bits (the batch norms' too). */
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
        t->rule[L] = t->other[L] = (uint8_t)td__choice_taken(be, L);
        if (L == 0 || !td__is_conv(be, L))
            continue;
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

/* Both kernel plans timed in turns (unless the cache holds every key),
 * what was measured per key into t->got; the rules' plan is planned
 * (and be->choice follows it).  1: not measured (a step too long). */
static int td__measure(td__cpu *be, td__sess *s, td__tune *t)
{
    int n = be->base.model->nlayers, rc = 0, cached = 1;
    for (int k = 0; k < t->nkeys; k++)
        cached &= td__cache_get(&t->keys[k], &t->got[k]);
    if (cached)
        return 0;
    if ((rc = td__sess_open(be, s)))
        return rc;
    for (int k = 0; k < t->nkeys; k++)
        t->got[k] = (td__times){{INT64_MAX, INT64_MAX}, 0};
    TD__INFO(be, "cpu backend: timing %d kernel choice%s (per convolution "
             "shape and gradient): two plans in turns, a few steps each",
             t->nkeys, t->nkeys == 1 ? "" : "s");
    for (int r = 0; r < s->rounds && rc == 0; r++) {
        td__round_start(t);
        for (int plan = 0; plan < 2 && rc == 0; plan++) {
            int64_t ns;
            memcpy(be->choice, plan ? t->other : t->rule, (size_t)n);
            if (r > 0 || plan > 0) /* the first: planned */
                rc = td__replan(be, s);
            if (rc == 0)
                rc = td__steps(be, s, t, s->passes, &ns);
        }
        td__round_end(t);
        if (r == 1 && td__agreed(t))
            break; /* a third round's medians would decide the same */
    }
    for (int k = 0; k < t->nkeys && rc == 0; k++) {
        t->got[k].ratio = td__median(&t->ratios[k * TD__ROUNDS],
                                     t->nratios[k]);
        td__cache_put(&t->keys[k], &t->got[k]);
    }
    return rc;
}

/* The kernel choices (step 3): measured, then planned with.  *changed
 * and *convs: convolutions away from the rules, of how many. */
static int td__kernels(td__cpu *be, td__sess *s, int *changed, int *convs)
{
    int n = be->base.model->nlayers, rc;
    td__tune t = {0};
    int *take = NULL;
    if ((rc = td__keys(be, &t)) || t.nkeys == 0)
        goto out; /* nothing to choose */
    if ((rc = td__measure(be, s, &t)))
        goto out; /* 1: not measured, the rules' plan stays */
    /* per key the faster kernel (the rule's unless clearly slower) */
    if (!(take = calloc((size_t)(t.nkeys > 0 ? t.nkeys : 1), sizeof *take))) {
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
        *convs += td__is_conv(be, L);
        *changed += want != t.rule[L];
        be->choice[L] = want;
    }
    /* plan again unless the current plan is the one wanted */
    int same = 1;
    for (int L = 1; L < n && same; L++)
        same = td__choice_taken(be, L) == be->choice[L];
    if (!same)
        rc = td__replan(be, s);
out:
    free(take);
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

/* A whole-plan choice's outcome for the summary: "<what> <taken> (<the
 * other> <its step time over the taken's>x); ". */
static void td__say(char *out, size_t cap, const char *what,
                    const char *rule, const char *other, int took_other,
                    const td__times *t)
{
    double f = t->ratio > 0 ? took_other ? 1 / t->ratio : t->ratio : 0;
    if (t->ratio < 0)
        snprintf(out, cap, "%s %s (%s cannot be planned); ", what, rule,
                 other);
    else
        snprintf(out, cap, "%s %s (%s %.2fx the step time); ", what,
                 took_other ? other : rule, took_other ? rule : other, f);
}

int td__cpu_tune(td__cpu *be)
{
    const td_model *m = be->base.model;
    int n = m->nlayers, rc = 0, changed = 0, convs = 0;
    int ly_rule = be->layout_rule, ly_other = 0, bn_other = 0;
    int ly_measured = 0, bn_measured = 0, bns = 0;
    td__times ly_t = {{0, 0}, 0}, bn_t = {{0, 0}, 0};
    td__sess s = {0};
    if (be->base.cfg.plan != TD_PLAN_MEASURE || !td__is_bf16(be))
        return 0;
    int64_t t0 = td_now_ns();
    /* 1. the layout, each side with its own rules for the rest */
    be->choice_set = 0;
    if (!td__layout_forced() && td__other_layout(ly_rule) != TD__LY_RULE) {
        rc = td__plan_choice(be, &s, TD__P_LAYOUT, ly_rule, &ly_other,
                             &ly_t);
        ly_measured = rc == 0;
    }
    /* 2. the batch norms, in that layout; from here the plan follows
     * be->choice, which starts as the rules' */
    for (int L = 0; L < n && rc == 0; L++) {
        be->choice[L] = (uint8_t)td__choice_taken(be, L);
        bns += td__bn_can_fast(be, L);
    }
    be->choice_set = rc == 0;
    if (rc == 0 && bns > 0 && !td__choice_forced(be, 0, TD__CH_BNDNN)) {
        rc = td__plan_choice(be, &s, TD__P_BN, 0, &bn_other, &bn_t);
        bn_measured = rc == 0;
    }
    /* 3. the kernels, in that plan */
    if (rc == 0)
        rc = td__kernels(be, &s, &changed, &convs);
    td__sess_close(be, &s);
    if (rc) /* 1: a step too long, the rules' plan as planned */
        return rc < 0 ? rc : 0;
    char text[1024], ly[96] = "", bn[96] = "";
    if (td__cpu_plan_get(&be->base, text, sizeof text))
        snprintf(text, sizeof text, "(%d layers)", n);
    if (ly_measured)
        td__say(ly, sizeof ly, "layout", td__ly_name(ly_rule),
                td__ly_name(td__other_layout(ly_rule)), ly_other, &ly_t);
    if (bn_measured)
        td__say(bn, sizeof bn, "batch norm", "hand-written", "oneDNN's",
                bn_other, &bn_t);
    TD__INFO(be, "cpu backend: plan measured in %.2f s (%d steps timed%s): "
             "%s%s%d of %d convolutions' kernels away from the fixed "
             "rules: %s", (double)(td_now_ns() - t0) / 1e9, s.timed,
             s.timed ? "" : ", the times from earlier in this process",
             ly, bn, changed, convs,
             text);
    return 0;
}

/* The layout the plan lays activations out in (TD__LY_*). */
static int td__ly_of(const td__cpu *be)
{
    return be->atag == dnnl_nhwc      ? TD__LY_NHWC
           : be->atag == dnnl_nChw16c ? TD__LY_BLK16
                                      : TD__LY_ANY;
}

int td__cpu_plan_get(td_backend *b, char *out, size_t cap)
{
    td__cpu *be = td__be(b);
    int n = b->model->nlayers;
    if (!td__is_bf16(be))
        return -ENOTSUP; /* an fp32 plan has no choices to record */
    int w = snprintf(out, cap, "v2 %s ", td__ly_name(td__ly_of(be)));
    if (w < 0 || (size_t)w + (size_t)n + 1 > cap)
        return -ENOSPC;
    for (int L = 0; L < n; L++)
        out[w + L] =
            L > 0 && td__is_conv(be, L) ? (char)('0' + td__choice_taken(be, L))
            : td__bn_can_fast(be, L)    ? (be->cl[L].fast ? 'h' : 'o')
                                        : '.';
    out[w + n] = '\0';
    return 0;
}

/* Text `c` (the characters after the layout) of version v fits the
 * model; else the error in b->err. */
static int td__text_fits(td__cpu *be, int v, const char *c)
{
    const td_model *m = be->base.model;
    int n = m->nlayers;
    if ((int)strlen(c) != n) {
        snprintf(be->base.err, sizeof be->base.err, "plan choices for %zu "
                 "layers; the model has %d", strlen(c), n);
        return -EINVAL;
    }
    for (int L = 0; L < n; L++) {
        int conv = L > 0 && td__is_conv(be, L);
        int bn = v == 2 && m->layers[L].kind == TD_L_BN;
        int ok = conv ? c[L] >= '0' && c[L] <= '3'
                 : bn ? c[L] == 'h' || c[L] == 'o' || c[L] == '.'
                      : c[L] == '.';
        if (!ok) {
            snprintf(be->base.err, sizeof be->base.err, "plan choices: "
                     "layer %d (%s) has '%c', expected %s", L,
                     m->layers[L].name, c[L],
                     conv ? "0..3 (a convolution)"
                     : bn ? "'h', 'o' or '.' (a batch norm)"
                          : "'.'");
            return -EINVAL;
        }
    }
    return 0;
}

/* 1 when the plan as planned (its text into now) is what layout `pick`
 * and characters `c` of version v ask (a v1 text has '.' for every
 * batch norm: the rule's kernel, cpu_bn.c's where it can run); 0 when
 * not; < 0 on error. */
static int td__planned_as(td__cpu *be, int v, int pick, const char *c,
                          char *now, size_t cap)
{
    int rc = td__cpu_plan_get(&be->base, now, cap);
    if (rc)
        return rc;
    if (td__ly_of(be) != pick)
        return 0;
    const char *nc = strchr(now + 3, ' ') + 1;
    for (int L = 0; c[L]; L++) {
        int v1bn = v == 1 && be->base.model->layers[L].kind == TD_L_BN;
        if (v1bn ? nc[L] == 'o' : c[L] != nc[L])
            return 0;
    }
    return 1;
}

int td__cpu_plan_set(td_backend *b, const char *choices)
{
    td__cpu *be = td__be(b);
    int n = b->model->nlayers, rc, v = 0, pick;
    char layout[16], now[1024];
    const char *sp;
    if (!td__is_bf16(be)) {
        snprintf(b->err, sizeof b->err, "plan choices: an fp32 plan has "
                 "none (only bf16 plans choose kernels)");
        return -ENOTSUP;
    }
    if (sscanf(choices, "v%d %15s", &v, layout) != 2 || (v != 1 && v != 2) ||
        !(sp = strchr(choices + 3, ' '))) {
        snprintf(b->err, sizeof b->err, "plan choices \"%.40s\": not "
                 "\"v2 <layout> <one character per layer>\" (or v1)",
                 choices);
        return -EINVAL;
    }
    const char *c = sp + 1;
    for (pick = TD__LY_NHWC; pick <= TD__LY_ANY; pick++)
        if (strcmp(layout, td__ly_name(pick)) == 0)
            break;
    if (pick > TD__LY_ANY) {
        snprintf(b->err, sizeof b->err, "plan choices: unknown layout "
                 "\"%s\" (nhwc, nChw16c or any)", layout);
        return -EINVAL;
    }
    if ((rc = td__text_fits(be, v, c)))
        return rc;
    if ((rc = td__planned_as(be, v, pick, c, now, sizeof now)))
        return rc < 0 ? rc : 0; /* 1: planned so already */
    uint8_t *keep = malloc((size_t)n);
    if (!keep)
        return -ENOMEM;
    int keep_pick = be->layout_pick, keep_set = be->choice_set;
    memcpy(keep, be->choice, (size_t)n);
    be->layout_pick = pick;
    for (int L = 0; L < n; L++)
        be->choice[L] = c[L] == 'o' ? TD__CH_BNDNN
                        : c[L] >= '0' && c[L] <= '3' ? (uint8_t)(c[L] - '0')
                                                     : 0;
    be->choice_set = 1;
    if ((rc = td__replan(be, NULL))) {
        /* the plan the backend had, so that it still trains */
        char why[sizeof b->err];
        snprintf(why, sizeof why, "%s", b->err);
        be->layout_pick = keep_pick;
        be->choice_set = keep_set;
        memcpy(be->choice, keep, (size_t)n);
        free(keep);
        if (td__replan(be, NULL))
            return rc;
        snprintf(b->err, sizeof b->err, "plan choices %.60s: %.160s",
                 choices, why);
        return rc;
    }
    free(keep);
    if ((rc = td__planned_as(be, v, pick, c, now, sizeof now)) < 0)
        return rc;
    if (!rc) {
        snprintf(b->err, sizeof b->err, "plan choices %.80s cannot all be "
                 "made here (an environment switch or another CPU); "
                 "planned %.80s", choices, now);
        return -EINVAL;
    }
    return 0;
}
