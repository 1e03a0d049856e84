/* notify.h - the systemd service protocol, written out (it is a few dozen
 * lines; libsystemd would add a dependency for two functions):
 *
 *   sd_notify: datagrams "READY=1", "STATUS=...", "STOPPING=1",
 *              "EXTEND_TIMEOUT_USEC=N", "WATCHDOG=1" to $NOTIFY_SOCKET
 *              (a path, or an abstract name written "@name").
 *   watchdog:  $WATCHDOG_USEC (and $WATCHDOG_PID, if set, naming us).
 *   socket activation: $LISTEN_PID == our pid and $LISTEN_FDS >= 1 means
 *              fd 3 is a listening socket passed by systemd.
 * Every function is a no-op (returning 0) outside systemd.
 */
#ifndef TD_NOTIFY_H
#define TD_NOTIFY_H

#include <stdint.h>

/* Sends one notification message.  0 if sent or if there is no
 * NOTIFY_SOCKET; a negative code if sending failed. */
int td_notify(const char *msg);
int td_notifyf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The watchdog interval in microseconds, or 0 when not enabled for us. */
uint64_t td_notify_watchdog_usec(void);

/* The first socket passed by systemd (fd 3), or -1 if none was passed to
 * this process.  Unsets the LISTEN_* variables so children do not see
 * them. */
int td_notify_listen_fd(void);

#endif
