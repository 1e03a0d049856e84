/* submit.h - the submit command (docs/design.md#the-control-protocol).
 *
 * Loop thread: parses the spec and makes the refusals that read nothing,
 * then checks the job's files on libuv's threadpool as the submitter and
 * queues the job back on the loop; the connection's later requests wait
 * for its reply (td_client_hold).  See submit.c.
 */
#ifndef TD_DAEMON_SUBMIT_H
#define TD_DAEMON_SUBMIT_H

#include "daemon.h"

void td_cmd_submit(td_client *c, td_request *req);

#endif
