/* curves.c - a job's learning curves (see curves.h).
 *
 * Owns: picking the curve fields out of the trainer's events, replacing
 * what a resumed job reports again, thinning the window series.
 * Never: formats for people (trainctl history and plot do), touches the
 * disk (the record is saved with the job, jobs.c).
 */
#include "curves.h"

#include <errno.h>

#include "job/runner.h"

static const char *const td__window_keys[] = {
    "step", "epoch", "train_loss", "lr", "samples_per_s", "input_wait_ratio",
    "device_idle_ratio", "verdict", NULL};

int td_curves_init(td_curves *c)
{
    c->history = json_array();
    c->curve = json_array();
    c->every = 1;
    c->windows = 0;
    if (!c->history || !c->curve) {
        td_curves_free(c);
        return -ENOMEM;
    }
    return 0;
}

void td_curves_free(td_curves *c)
{
    json_decref(c->history);
    json_decref(c->curve);
    c->history = c->curve = NULL;
}

/* The keys of data that are present, null kept as null. */
static json_t *td__pick(const json_t *data, const char *const *keys)
{
    json_t *o = json_object();
    for (int k = 0; o && keys[k]; k++) {
        json_t *v = json_object_get(data, keys[k]);
        if (v && json_object_set(o, keys[k], v) < 0) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

/* Drops the trailing entries whose `key` is >= v (reported again). */
static void td__drop_from(json_t *a, const char *key, json_int_t v)
{
    size_t n = json_array_size(a);
    while (n > 0 && json_integer_value(json_object_get(json_array_get(
                        a, n - 1), key)) >= v)
        json_array_remove(a, --n);
}

int td_curves_epoch(td_curves *c, const json_t *data)
{
    if (!json_is_integer(json_object_get(data, "epoch")))
        return 0;
    json_t *e = td__pick(data, td_runner_curve_keys);
    if (!e)
        return -ENOMEM;
    td__drop_from(c->history, "epoch",
                  json_integer_value(json_object_get(data, "epoch")));
    return json_array_append_new(c->history, e) ? -ENOMEM : 0;
}

int td_curves_window(td_curves *c, const json_t *data)
{
    json_t *step = json_object_get(data, "step");
    if (!json_is_integer(step))
        return 0;
    size_t n = json_array_size(c->curve);
    json_int_t last = n ? json_integer_value(json_object_get(
                              json_array_get(c->curve, n - 1), "step"))
                        : -1;
    if (json_integer_value(step) <= last) /* the job runs again from a
                                               checkpoint */
        td__drop_from(c->curve, "step", json_integer_value(step));
    if (c->windows++ % c->every != 0)
        return 0;
    json_t *p = td__pick(data, td__window_keys);
    if (!p)
        return -ENOMEM;
    /* windows before the window mean existed: the last step's loss */
    if (!json_object_get(p, "train_loss") && json_object_get(data, "loss"))
        json_object_set(p, "train_loss", json_object_get(data, "loss"));
    if (json_array_append_new(c->curve, p))
        return -ENOMEM;
    if (json_array_size(c->curve) >= TD_CURVE_MAX) {
        for (size_t i = 1; i < json_array_size(c->curve); i++)
            json_array_remove(c->curve, i); /* the odd ones */
        c->every *= 2;
    }
    return 0;
}

int td_curves_restore(td_curves *c, const json_t *history)
{
    size_t i;
    json_t *e;
    int added = 0;
    json_array_foreach(history, i, e) {
        json_t *ep = json_object_get(e, "epoch");
        if (!json_is_object(e) || !json_is_integer(ep))
            continue;
        json_int_t want = json_integer_value(ep);
        size_t at = 0, n = json_array_size(c->history);
        while (at < n && json_integer_value(json_object_get(
                             json_array_get(c->history, at), "epoch")) < want)
            at++;
        if (at < n && json_integer_value(json_object_get(
                          json_array_get(c->history, at), "epoch")) == want)
            continue; /* kept already */
        json_t *copy = td__pick(e, td_runner_curve_keys);
        if (!copy || json_array_insert_new(c->history, at, copy))
            return -ENOMEM;
        added++;
    }
    return added;
}

void td_curves_to_record(const td_curves *c, json_t *rec)
{
    if (c->history)
        json_object_set(rec, "history", c->history);
    if (c->curve)
        json_object_set(rec, "curve", c->curve);
    json_object_set_new(rec, "curve_every", json_integer(c->every));
    json_object_set_new(rec, "curve_windows", json_integer(c->windows));
}

int td_curves_from_record(td_curves *c, const json_t *rec)
{
    int rc = td_curves_init(c);
    if (rc)
        return rc;
    json_t *h = json_object_get(rec, "history");
    json_t *k = json_object_get(rec, "curve");
    json_t *v;
    size_t i;
    json_array_foreach(h, i, v)
        if (json_is_object(v) && json_array_append(c->history, v))
            return -ENOMEM;
    json_array_foreach(k, i, v)
        if (json_is_object(v) && json_array_size(c->curve) < TD_CURVE_MAX &&
            json_array_append(c->curve, v))
            return -ENOMEM;
    json_int_t every = json_integer_value(json_object_get(rec,
                                                          "curve_every"));
    json_int_t seen = json_integer_value(json_object_get(rec,
                                                         "curve_windows"));
    c->every = every >= 1 && every <= ((json_int_t)1 << 40) ? every : 1;
    c->windows = seen >= 0 ? seen : 0;
    return 0;
}
