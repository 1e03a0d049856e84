/* retention.c - ended jobs removed after ended_job_retention_days (see
 * retention.h).  Loop thread only. */
#include "retention.h"

#include "base/clock.h"
#include "base/log.h"
#include "remove.h"
#include "settings.h"

/* A sweep an hour: the setting counts days. */
#define TD__SWEEP_EVERY_NS (3600 * TD_NS_PER_S)

void td_retention_due(td_daemon *d) { d->retention_due = 1; }

int td_retention_tick(td_daemon *d)
{
    long long days = td_settings_int(d->settings, "ended_job_retention_days");
    int64_t now = td_now_ns();
    if (days <= 0 || d->shutting_down)
        return 0;
    if (!d->retention_due && d->retention_last_ns &&
        now - d->retention_last_ns < TD__SWEEP_EVERY_NS)
        return 0;
    d->retention_due = 0;
    d->retention_last_ns = now;
    double wall = (double)td_wall_ns() / 1e9, before = wall - days * 86400.0;
    int n = 0;
    for (td_job *j = d->jobs.head, *next; j; j = next) {
        next = j->next; /* a removal takes j out of the list */
        if (!td_job_state_final(j->state) || j->removing || j->ended <= 0 ||
            j->ended >= before)
            continue;
        const td_job *k = td_remove_needed_by(d, j);
        if (k) {
            td_debug("job %lld is past ended_job_retention_days but job "
                     "%lld reads its checkpoint: kept", (long long)j->id,
                     (long long)k->id);
            continue;
        }
        if (n == TD_RETENTION_PER_SWEEP) {
            d->retention_due = 1; /* the rest at the next tick */
            break;
        }
        td_info("job %lld (%s, %s) ended %.1f days ago, more than "
                "ended_job_retention_days (%lld): removing its record, log "
                "and checkpoints", (long long)j->id, j->name,
                td_job_state_name(j->state), (wall - j->ended) / 86400.0,
                days);
        td_remove_job(d, j, 0, NULL);
        n++;
    }
    return n;
}
