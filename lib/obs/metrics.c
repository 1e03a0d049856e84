/* metrics.c - step phase attribution, windows, verdicts, exports.
 *
 * Owns: the thresholds and advice table (the only place they are written;
 * docs/metrics.md mirrors them), two window accumulators (one collecting
 * host times, one waiting for late device times), the epoch accumulator,
 * the two-window verdict hysteresis, and the JSON / Prometheus renderings.
 * Never: reads a clock, sleeps, locks, or talks to anything; the trainer
 * calls it on its own thread and hands the JSON to whoever publishes it.
 */
#include "obs/metrics.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the tables --------------------------------------------------------- */

static const td_metrics_thresholds td__thr = {
    .checkpoint_ratio = 0.05,
    .checkpoint_outliers = 10,
    .outlier_factor = 2.0,
    .outlier_ckpt_share = 0.5,
    .input_high = 0.20,
    .input_moderate = 0.05,
    .h2d_share = 0.90,
    .host_high = 0.15,
    .host_moderate = 0.03,
    .compute_idle = 0.05,
};

const td_metrics_thresholds *td_metrics_get_thresholds(void)
{
    return &td__thr;
}

static const char *const td__phase_names[TD_PHASE_COUNT] = {
    "checkpoint", "data_wait", "h2d", "d2h", "other"};

static const char *const td__verdict_names[TD_VERDICT_COUNT] = {
    "none", "checkpoint_stall", "input_bound", "h2d_bound", "host_bound",
    "compute_bound", "unattributed_idle", "undetermined"};

/* Advice per verdict; [1] is used for the high severity when it differs. */
static const char *const td__advice[TD_VERDICT_COUNT][2] = {
    [TD_VERDICT_NONE] = {"No window has closed yet.", NULL},
    [TD_VERDICT_CHECKPOINT_STALL] =
        {"Checkpoints stall the trainer: checkpoint less often "
         "(checkpoint.every_steps), put the checkpoint directory on faster "
         "storage, or check that the writer keeps up (skipped checkpoints "
         "are counted).", NULL},
    [TD_VERDICT_INPUT_BOUND] =
        {"Input sometimes lags: raise input.prefetch or add a decode worker "
         "(input.workers).",
         "The device mostly waits for input: add decode workers "
         "(input.workers), store smaller images (pre-resize the dataset so "
         "DCT-scaled decode does less work), use lighter augmentation, pack "
         "the data into tar shards, or use a larger model per sample."},
    [TD_VERDICT_H2D_BOUND] =
        {"Host-to-device copies block the trainer: use pinned host memory, "
         "keep batches uint8 (normalise on the device), and overlap copies "
         "with compute on a separate stream.", NULL},
    [TD_VERDICT_HOST_BOUND] =
        {"The device idles a little for reasons other than input or "
         "checkpoints (each step's fixed host cost): a larger batch "
         "(batch_size) spreads it over more samples.",
         "The device idles for reasons other than input or checkpoints "
         "(host overhead: each step's launches, synchronisation and loss "
         "readback cost the same whatever its size): use a larger batch "
         "(batch_size), which spreads that cost over more samples."},
    [TD_VERDICT_COMPUTE_BOUND] =
        {"The device is busy, as it should be: further speed needs a larger "
         "batch, mixed precision (\"precision\": \"bf16\" in the job "
         "spec), a faster model or a faster device.", NULL},
    [TD_VERDICT_UNATTRIBUTED_IDLE] =
        {"The device idles but neither input, checkpoints nor host overhead "
         "beyond the thresholds explain it: take a trace (trainctl trace) "
         "to see where the time goes.", NULL},
    [TD_VERDICT_UNDETERMINED] =
        {"The backend reported no device times for this window: only input "
         "and checkpoint stalls can be judged.", NULL},
};

const char *td_phase_name(enum td_phase p)
{
    return (unsigned)p < TD_PHASE_COUNT ? td__phase_names[p] : "?";
}

const char *td_verdict_name(enum td_verdict v)
{
    return (unsigned)v < TD_VERDICT_COUNT ? td__verdict_names[v] : "?";
}

const char *td_severity_name(enum td_severity s)
{
    return s == TD_SEV_HIGH ? "high" : s == TD_SEV_MODERATE ? "moderate"
                                                            : NULL;
}

const char *td_verdict_advice(enum td_verdict v, enum td_severity s)
{
    if ((unsigned)v >= TD_VERDICT_COUNT)
        return "";
    if (s == TD_SEV_HIGH && td__advice[v][1])
        return td__advice[v][1];
    return td__advice[v][0];
}

const char *td_verdict_advice_for(enum td_verdict v, enum td_severity s,
                                  enum td_precision_advice p)
{
    if (v != TD_VERDICT_COMPUTE_BOUND || p == TD_ADVICE_MIXED)
        return td_verdict_advice(v, s);
    return p == TD_ADVICE_IN_USE
               ? "The device is busy, as it should be, in mixed precision "
                 "already: further speed needs a larger batch, a faster "
                 "model or a faster device."
               : "The device is busy, as it should be: further speed needs "
                 "a larger batch, a faster model or a faster device (it has "
                 "no precision faster than fp32 for this job).";
}

const char *td_verdict_advice_input_cpus(enum td_severity s)
{
    return s == TD_SEV_HIGH
               ? "The device mostly waits for input, and the decode workers "
                 "already have every CPU the job may use, so more of them "
                 "will not help: store smaller images (pre-resize the "
                 "dataset so DCT-scaled decode does less work), use lighter "
                 "augmentation, pack the data into tar shards, use a larger "
                 "model per sample, or give the job more CPUs."
               : "Input sometimes lags, and the decode workers already have "
                 "every CPU the job may use: raise input.prefetch.";
}

/* ---- state -------------------------------------------------------------- */

struct td__win {
    int active;
    int64_t first_seq, first_step;
    int n_host, n_dev;
    int64_t samples, wall, wall_dev, busy, copy;
    int64_t phase[TD_PHASE_COUNT];
    int64_t *step_ns, *ckpt_ns;   /* per step, by seq - first_seq */
    uint8_t *dev_seen;
};

struct td__epoch {
    int64_t epoch, steps, samples, wall, max, busy, wall_dev;
    int64_t phase[TD_PHASE_COUNT];
    int started;
};

/* What a closed window measured (the inputs of the verdict). */
struct td__wstats {
    double wall_s, samples_per_s, mean_s, p50_s, p90_s, max_s;
    double share[TD_PHASE_COUNT];
    double input_wait, ckpt_ratio, idle, unattributed;
    int idle_known, outliers;
};

struct td_metrics {
    td_metrics_config cfg;
    int64_t next_seq, first_step;
    struct td__win win[2];
    int cur;                      /* win[cur] collects; win[!cur] pending */
    int64_t *scratch;
    td_step_times last;
    int64_t last_attr[TD_PHASE_COUNT];
    json_t *last_window;
    enum td_verdict cand;
    enum td_severity cand_sev;
    struct td__epoch ep;
    td_metrics_counters c;
};

int td_metrics_create(td_metrics **out, const td_metrics_config *cfg)
{
    td_metrics_config def = TD_METRICS_CONFIG_DEFAULT;
    *out = NULL;
    if (!cfg)
        cfg = &def;
    if (cfg->window_steps < 1 || cfg->warmup_steps < 0 ||
        cfg->max_device_lag < 0 || (unsigned)cfg->precision >
        TD_ADVICE_NO_FASTER)
        return -EINVAL;
    td_metrics *m = calloc(1, sizeof *m);
    if (!m)
        return -ENOMEM;
    m->cfg = *cfg;
    size_t n = (size_t)cfg->window_steps;
    m->scratch = malloc(n * sizeof(int64_t));
    int ok = m->scratch != NULL;
    for (int i = 0; i < 2; i++) {
        m->win[i].step_ns = malloc(n * sizeof(int64_t));
        m->win[i].ckpt_ns = malloc(n * sizeof(int64_t));
        m->win[i].dev_seen = malloc(n);
        ok = ok && m->win[i].step_ns && m->win[i].ckpt_ns &&
             m->win[i].dev_seen;
    }
    if (!ok) {
        td_metrics_destroy(m);
        return -ENOMEM;
    }
    *out = m;
    return 0;
}

void td_metrics_destroy(td_metrics *m)
{
    if (!m)
        return;
    for (int i = 0; i < 2; i++) {
        free(m->win[i].step_ns);
        free(m->win[i].ckpt_ns);
        free(m->win[i].dev_seen);
    }
    free(m->scratch);
    json_decref(m->last_window);
    free(m);
}

/* ---- attribution -------------------------------------------------------- */

/* Priority order checkpoint > data_wait > h2d > d2h; other = the rest. */
static void td__attribute(const td_step_times *t, int64_t out[])
{
    const int64_t want[TD_PHASE_OTHER] = {t->checkpoint_ns, t->data_wait_ns,
                                          t->h2d_ns, t->d2h_ns};
    int64_t left = t->total_ns;
    for (int p = 0; p < TD_PHASE_OTHER; p++) {
        out[p] = want[p] < left ? want[p] : left;
        left -= out[p];
    }
    out[TD_PHASE_OTHER] = left;
}

/* ---- verdicts ----------------------------------------------------------- */

/* First match wins (docs/metrics.md#verdicts). */
static enum td_verdict td__verdict(const struct td__wstats *s,
                                   enum td_severity *sev)
{
    const td_metrics_thresholds *th = &td__thr;
    *sev = TD_SEV_NONE;
    if (s->ckpt_ratio >= th->checkpoint_ratio ||
        s->outliers > th->checkpoint_outliers)
        return TD_VERDICT_CHECKPOINT_STALL;
    if (s->input_wait >= th->input_moderate) {
        *sev = s->input_wait >= th->input_high ? TD_SEV_HIGH
                                               : TD_SEV_MODERATE;
        if (s->share[TD_PHASE_H2D] > th->h2d_share * s->input_wait)
            return TD_VERDICT_H2D_BOUND;
        return TD_VERDICT_INPUT_BOUND;
    }
    if (!s->idle_known)
        return TD_VERDICT_UNDETERMINED;
    if (s->unattributed >= th->host_moderate) {
        *sev = s->unattributed >= th->host_high ? TD_SEV_HIGH
                                                : TD_SEV_MODERATE;
        return TD_VERDICT_HOST_BOUND;
    }
    if (s->idle < th->compute_idle)
        return TD_VERDICT_COMPUTE_BOUND;
    return TD_VERDICT_UNATTRIBUTED_IDLE;
}

/* The reported verdict changes only when two consecutive windows agree on
 * a new one; the first window's verdict is taken as it is. */
static void td__hysteresis(td_metrics *m, enum td_verdict v,
                           enum td_severity sev)
{
    if (m->c.verdict == TD_VERDICT_NONE ||
        (v == m->cand && sev == m->cand_sev)) {
        m->c.verdict = v;
        m->c.severity = sev;
        m->cand = TD_VERDICT_NONE;
    } else if (v == m->c.verdict && sev == m->c.severity) {
        m->cand = TD_VERDICT_NONE;
    } else {
        m->cand = v;
        m->cand_sev = sev;
    }
}

/* ---- windows ------------------------------------------------------------ */

static int td__cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile of sorted v[0..n). */
static int64_t td__pct(const int64_t *v, int n, double q)
{
    int k = (int)ceil(q * n);
    return v[k < 1 ? 0 : k - 1];
}

static void td__wstats(td_metrics *m, const struct td__win *w,
                       struct td__wstats *s)
{
    int n = w->n_host;
    memset(s, 0, sizeof *s);
    memcpy(m->scratch, w->step_ns, (size_t)n * sizeof(int64_t));
    qsort(m->scratch, (size_t)n, sizeof(int64_t), td__cmp_i64);
    double wall = (double)w->wall;
    s->wall_s = wall / 1e9;
    s->samples_per_s = wall > 0 ? (double)w->samples / s->wall_s : 0;
    s->mean_s = s->wall_s / n;
    s->p50_s = (double)td__pct(m->scratch, n, 0.5) / 1e9;
    s->p90_s = (double)td__pct(m->scratch, n, 0.9) / 1e9;
    s->max_s = (double)m->scratch[n - 1] / 1e9;
    for (int p = 0; p < TD_PHASE_COUNT; p++)
        s->share[p] = wall > 0 ? (double)w->phase[p] / wall : 0;
    s->input_wait = s->share[TD_PHASE_DATA_WAIT] + s->share[TD_PHASE_H2D];
    s->ckpt_ratio = s->share[TD_PHASE_CHECKPOINT];
    double p50 = (double)td__pct(m->scratch, n, 0.5);
    for (int i = 0; i < n; i++)
        if ((double)w->step_ns[i] > td__thr.outlier_factor * p50 &&
            (double)w->ckpt_ns[i] >
                td__thr.outlier_ckpt_share * (double)w->step_ns[i])
            s->outliers++;
    s->idle_known = w->n_dev > 0 && w->wall_dev > 0;
    if (s->idle_known) {
        s->idle = 1.0 - (double)w->busy / (double)w->wall_dev;
        s->idle = s->idle < 0 ? 0 : s->idle;
        s->unattributed = s->idle - s->input_wait - s->ckpt_ratio;
        s->unattributed = s->unattributed < 0 ? 0 : s->unattributed;
    }
}

static json_t *td__phases_json(const int64_t *ph, double wall, int shares)
{
    json_t *o = json_object();
    for (int p = 0; p < TD_PHASE_COUNT; p++)
        json_object_set_new(o, td__phase_names[p],
                            json_real(shares ? (wall > 0 ? (double)ph[p] /
                                                                wall
                                                         : 0)
                                             : (double)ph[p] / 1e9));
    return o;
}

static json_t *td__ratio_or_null(int known, double v)
{
    return known ? json_real(v) : json_null();
}

static json_t *td__window_json(const td_metrics *m, const struct td__win *w,
                               const struct td__wstats *s,
                               enum td_verdict raw, enum td_severity rsev)
{
    const char *sev = td_severity_name(m->c.severity);
    const char *rs = td_severity_name(rsev);
    return json_pack(
        "{s:I, s:I, s:I, s:i, s:I, s:f, s:f,"
        " s:{s:f, s:f, s:f, s:f}, s:o, s:o,"
        " s:f, s:f, s:o, s:b, s:b, s:f, s:f, s:o, s:i,"
        " s:s, s:o, s:s, s:o, s:s}",
        "window", (json_int_t)m->c.windows_total,
        "first_step", (json_int_t)w->first_step,
        "last_step", (json_int_t)(w->first_step + w->n_host - 1),
        "steps", w->n_host, "samples", (json_int_t)w->samples,
        "wall_s", s->wall_s, "samples_per_s", s->samples_per_s,
        "step_time_s", "mean", s->mean_s, "p50", s->p50_s, "p90", s->p90_s,
        "max", s->max_s,
        "phases_s", td__phases_json(w->phase, (double)w->wall, 0),
        "phase_shares", td__phases_json(w->phase, (double)w->wall, 1),
        "device_busy_s", (double)w->busy / 1e9,
        "device_copy_s", (double)w->copy / 1e9,
        "device_idle_ratio", td__ratio_or_null(s->idle_known, s->idle),
        "device_idle_is_lower_bound", 1,
        "device_times_complete", w->n_dev == w->n_host,
        "input_wait_ratio", s->input_wait, "checkpoint_ratio", s->ckpt_ratio,
        "unattributed_idle_ratio",
        td__ratio_or_null(s->idle_known, s->unattributed),
        "checkpoint_outlier_steps", s->outliers,
        "verdict", td_verdict_name(m->c.verdict),
        "severity", sev ? json_string(sev) : json_null(),
        "raw_verdict", td_verdict_name(raw),
        "raw_severity", rs ? json_string(rs) : json_null(),
        "advice", td_verdict_advice_for(m->c.verdict, m->c.severity,
                                        m->cfg.precision));
}

static void td__close_window(td_metrics *m, struct td__win *w)
{
    struct td__wstats s;
    enum td_severity sev;
    td__wstats(m, w, &s);
    enum td_verdict v = td__verdict(&s, &sev);
    td__hysteresis(m, v, sev);
    m->c.windows_total++;
    m->c.samples_per_s = s.samples_per_s;
    m->c.device_idle_known = s.idle_known;
    m->c.device_idle_ratio = s.idle_known ? s.idle : 0;
    m->c.input_wait_ratio = s.input_wait;
    m->c.step_p50_s = s.p50_s;
    m->c.step_p90_s = s.p90_s;
    json_decref(m->last_window);
    m->last_window = td__window_json(m, w, &s, v, sev);
    w->active = 0;
}

static void td__win_start(struct td__win *w, int64_t seq, int64_t step,
                          int n)
{
    int64_t *sn = w->step_ns, *cn = w->ckpt_ns;
    uint8_t *ds = w->dev_seen;
    memset(w, 0, sizeof *w);
    w->step_ns = sn;
    w->ckpt_ns = cn;
    w->dev_seen = ds;
    memset(ds, 0, (size_t)n);
    w->active = 1;
    w->first_seq = seq;
    w->first_step = step;
}

/* Adds device times for window offset i. */
static void td__win_device(struct td__win *w, int i, int64_t compute,
                           int64_t copy)
{
    w->dev_seen[i] = 1;
    w->n_dev++;
    w->busy += compute;
    w->copy += copy > 0 ? copy : 0;
    w->wall_dev += w->step_ns[i];
}

/* ---- feeding ------------------------------------------------------------ */

static int td__valid(const td_step_times *t)
{
    return t->total_ns >= 0 && t->data_wait_ns >= 0 && t->h2d_ns >= 0 &&
           t->d2h_ns >= 0 && t->checkpoint_ns >= 0 && t->samples >= 0;
}

static void td__epoch_add(td_metrics *m, const td_step_times *t,
                          const int64_t *attr)
{
    struct td__epoch *e = &m->ep;
    if (!e->started) {
        memset(e, 0, sizeof *e);
        e->started = 1;
        e->epoch = t->epoch;
    }
    e->steps++;
    e->samples += t->samples;
    e->wall += t->total_ns;
    e->max = t->total_ns > e->max ? t->total_ns : e->max;
    for (int p = 0; p < TD_PHASE_COUNT; p++)
        e->phase[p] += attr[p];
}

/* Closes the pending window when its device times are complete or overdue,
 * and moves a full collecting window to pending.  Returns windows closed. */
static int td__advance(td_metrics *m, int64_t seq)
{
    struct td__win *cur = &m->win[m->cur], *pend = &m->win[!m->cur];
    int closed = 0, n = m->cfg.window_steps;
    if (cur->active && cur->n_host == n) {
        if (pend->active) {
            td__close_window(m, pend);
            closed++;
        }
        m->cur = !m->cur;
        pend = cur;
    }
    if (pend->active &&
        (pend->n_dev == n ||
         seq - (pend->first_seq + n - 1) >= m->cfg.max_device_lag)) {
        td__close_window(m, pend);
        closed++;
    }
    return closed;
}

int td_metrics_step(td_metrics *m, const td_step_times *t)
{
    int64_t attr[TD_PHASE_COUNT];
    if (!td__valid(t))
        return -EINVAL;
    if (m->next_seq == 0)
        m->first_step = t->step;
    else if (t->step != m->first_step + m->next_seq)
        return -EINVAL;
    int64_t seq = m->next_seq++;
    td__attribute(t, attr);
    m->c.steps_total++;
    m->c.samples_total += (uint64_t)t->samples;
    m->c.step_seconds_total += (double)t->total_ns / 1e9;
    for (int p = 0; p < TD_PHASE_COUNT; p++)
        m->c.phase_seconds_total[p] += (double)attr[p] / 1e9;
    m->last = *t;
    memcpy(m->last_attr, attr, sizeof attr);
    if (seq < m->cfg.warmup_steps) {
        if (t->compute_ns >= 0)
            td_metrics_device(m, t->step, t->compute_ns, t->copy_ns);
        return 0;
    }
    struct td__win *w = &m->win[m->cur];
    if (!w->active)
        td__win_start(w, seq, t->step, m->cfg.window_steps);
    int i = (int)(seq - w->first_seq);
    w->step_ns[i] = t->total_ns;
    w->ckpt_ns[i] = attr[TD_PHASE_CHECKPOINT];
    w->n_host++;
    w->samples += t->samples;
    w->wall += t->total_ns;
    for (int p = 0; p < TD_PHASE_COUNT; p++)
        w->phase[p] += attr[p];
    td__epoch_add(m, t, attr);
    if (t->compute_ns >= 0)
        td_metrics_device(m, t->step, t->compute_ns, t->copy_ns);
    return td__advance(m, seq);
}

int td_metrics_device(td_metrics *m, int64_t step, int64_t compute_ns,
                      int64_t copy_ns)
{
    int64_t seq = step - m->first_step;
    if (compute_ns < 0 || seq < 0 || seq >= m->next_seq)
        return -EINVAL;
    m->c.device_busy_seconds_total += (double)compute_ns / 1e9;
    m->c.device_copy_seconds_total +=
        copy_ns > 0 ? (double)copy_ns / 1e9 : 0;
    if (seq < m->cfg.warmup_steps)
        return 0;
    for (int k = 0; k < 2; k++) {
        struct td__win *w = &m->win[k];
        int64_t i = seq - w->first_seq;
        if (!w->active || i < 0 || i >= w->n_host)
            continue;
        if (w->dev_seen[i])
            return -EINVAL; /* reported twice */
        td__win_device(w, (int)i, compute_ns, copy_ns);
        m->ep.busy += compute_ns;
        m->ep.wall_dev += w->step_ns[i];
        /* only the pending window can close here */
        if (k != m->cur && w->n_dev == m->cfg.window_steps) {
            td__close_window(m, w);
            return 1;
        }
        return 0;
    }
    m->c.late_device_reports++;
    return 0;
}

/* ---- payloads ----------------------------------------------------------- */

json_t *td_metrics_step_json(const td_metrics *m)
{
    const td_step_times *t = &m->last;
    double s = (double)t->total_ns / 1e9;
    json_t *o = json_pack(
        "{s:I, s:I, s:I, s:f, s:f, s:o}", "step", (json_int_t)t->step,
        "epoch", (json_int_t)t->epoch, "samples", (json_int_t)t->samples,
        "step_s", s, "samples_per_s", s > 0 ? (double)t->samples / s : 0.0,
        "phases_s", td__phases_json(m->last_attr, 0, 0));
    if (o && t->compute_ns >= 0)
        json_object_set_new(o, "device_busy_s",
                            json_real((double)t->compute_ns / 1e9));
    if (o && !isnan(t->loss) && !isinf(t->loss))
        json_object_set_new(o, "loss", json_real(t->loss));
    return o;
}

json_t *td_metrics_window_json(const td_metrics *m)
{
    return m->last_window ? json_deep_copy(m->last_window) : NULL;
}

json_t *td_metrics_end_epoch(td_metrics *m)
{
    const struct td__epoch *e = &m->ep;
    double wall = (double)e->wall / 1e9;
    int known = e->wall_dev > 0;
    /* An epoch spent wholly in the warm-up (a short epoch, or the rest of
     * one after a resume, whose warm-up starts again) measured nothing:
     * null, not 0 samples/s. */
    int measured = e->steps > 0 && e->wall > 0;
    double idle = known ? 1.0 - (double)e->busy / (double)e->wall_dev : 0;
    const char *sev = td_severity_name(m->c.severity);
    json_t *o = json_pack(
        "{s:I, s:I, s:I, s:f, s:o, s:{s:f, s:f}, s:o, s:o, s:o, s:o,"
        " s:s, s:o}",
        "epoch", (json_int_t)(e->started ? e->epoch : m->last.epoch),
        "steps", (json_int_t)e->steps, "samples", (json_int_t)e->samples,
        "wall_s", wall, "samples_per_s",
        td__ratio_or_null(measured, (double)e->samples / wall),
        "step_time_s", "mean",
        e->steps ? wall / (double)e->steps : 0.0, "max",
        (double)e->max / 1e9, "phases_s", td__phases_json(e->phase, 0, 0),
        "phase_shares", td__phases_json(e->phase, (double)e->wall, 1),
        "input_wait_ratio",
        td__ratio_or_null(measured,
                          (double)(e->phase[TD_PHASE_DATA_WAIT] +
                                   e->phase[TD_PHASE_H2D]) / (double)e->wall),
        "device_idle_ratio", td__ratio_or_null(known, idle < 0 ? 0 : idle),
        "verdict", td_verdict_name(m->c.verdict), "severity",
        sev ? json_string(sev) : json_null());
    memset(&m->ep, 0, sizeof m->ep);
    return o;
}

void td_metrics_get_counters(const td_metrics *m, td_metrics_counters *c)
{
    *c = m->c;
}

/* ---- Prometheus --------------------------------------------------------- */

struct td__buf {
    char *p;
    size_t cap, len;
    int overflow;
};

__attribute__((format(printf, 2, 3))) static void
td__put(struct td__buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->p + b->len, b->len < b->cap ? b->cap - b->len : 0,
                      fmt, ap);
    va_end(ap);
    if (n < 0 || b->len + (size_t)n >= b->cap)
        b->overflow = 1;
    else
        b->len += (size_t)n;
}

int td_metrics_prometheus(const td_metrics *m, long job, char *buf,
                          size_t cap)
{
    struct td__buf b = {buf, cap, 0, 0};
    const td_metrics_counters *c = &m->c;
    if (cap)
        buf[0] = '\0';
    td__put(&b, "# TYPE traind_samples_total counter\n"
                "traind_samples_total{job=\"%ld\"} %llu\n"
                "# TYPE traind_steps_total counter\n"
                "traind_steps_total{job=\"%ld\"} %llu\n",
            job, (unsigned long long)c->samples_total, job,
            (unsigned long long)c->steps_total);
    td__put(&b, "# TYPE traind_step_phase_seconds_total counter\n");
    for (int p = 0; p < TD_PHASE_COUNT; p++)
        td__put(&b,
                "traind_step_phase_seconds_total{job=\"%ld\",phase=\"%s\"} "
                "%.9g\n", job, td__phase_names[p], c->phase_seconds_total[p]);
    td__put(&b, "# TYPE traind_checkpoint_stall_seconds_total counter\n"
                "traind_checkpoint_stall_seconds_total{job=\"%ld\"} %.9g\n"
                "# TYPE traind_device_busy_seconds_total counter\n"
                "traind_device_busy_seconds_total{job=\"%ld\"} %.9g\n",
            job, c->phase_seconds_total[TD_PHASE_CHECKPOINT], job,
            c->device_busy_seconds_total);
    td__put(&b, "# TYPE traind_step_duration_seconds summary\n"
                "traind_step_duration_seconds{job=\"%ld\",quantile=\"0.5\"} "
                "%.9g\n"
                "traind_step_duration_seconds{job=\"%ld\",quantile=\"0.9\"} "
                "%.9g\n"
                "traind_step_duration_seconds_sum{job=\"%ld\"} %.9g\n"
                "traind_step_duration_seconds_count{job=\"%ld\"} %llu\n",
            job, c->step_p50_s, job, c->step_p90_s, job,
            c->step_seconds_total, job, (unsigned long long)c->steps_total);
    td__put(&b, "# TYPE traind_samples_per_second gauge\n"
                "traind_samples_per_second{job=\"%ld\"} %.9g\n"
                "# TYPE traind_input_wait_ratio gauge\n"
                "traind_input_wait_ratio{job=\"%ld\"} %.9g\n",
            job, c->samples_per_s, job, c->input_wait_ratio);
    if (c->device_idle_known)
        td__put(&b, "# TYPE traind_device_idle_ratio gauge\n"
                    "traind_device_idle_ratio{job=\"%ld\"} %.9g\n",
                job, c->device_idle_ratio);
    const char *sev = td_severity_name(c->severity);
    td__put(&b, "# TYPE traind_bottleneck_info gauge\n"
                "traind_bottleneck_info{job=\"%ld\",verdict=\"%s\","
                "severity=\"%s\"} 1\n",
            job, td_verdict_name(c->verdict), sev ? sev : "");
    return b.overflow ? -ENOSPC : (int)b.len;
}
