/* dashboard.h - the live dashboard page (daemon/dashboard.html), built
 * into traind as a string by daemon/embed_text.py at build time.
 *
 * The page is self-contained (inline CSS and JS, inline SVG, no external
 * asset of any kind); daemon/obs.c serves it on GET /dashboard and the
 * figures it polls on GET /dashboard/data.json.
 */
#ifndef TD_DAEMON_DASHBOARD_H
#define TD_DAEMON_DASHBOARD_H

#include <stddef.h>

extern const char td_dashboard_html[];
extern const size_t td_dashboard_html_len; /* without the final NUL */

#endif
