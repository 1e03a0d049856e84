/* fuzz_protocol.c - control-protocol bytes as a client sends them.
 *
 * Input: byte 0 picks the chunk size (1..256) the stream is fed to the
 * line buffer in, as reads of a socket would cut it; the rest is the
 * stream.  Every complete line goes through td_request_parse, and the
 * reply the daemon would send (ok with the args echoed, or the error with
 * its message) must be one line of valid JSON carrying the request's id.
 * The stream is also parsed once as a single request.  A small line cap
 * lets short inputs reach the too-long path.
 */
#include <errno.h>
#include <string.h>

#include <jansson.h>

#include "fuzz.h"
#include "proto/protocol.h"

#define TD__FUZZ_LINE_MAX 2048

/* A reply line: ends in '\n', no other newline, one JSON object with the
 * id given back (null when there was none). */
static void td__check_reply(char *line, const json_t *id)
{
    TD_FUZZ_CHECK(line != NULL);
    size_t n = strlen(line);
    TD_FUZZ_CHECK(n >= 2 && line[n - 1] == '\n');
    TD_FUZZ_CHECK(memchr(line, '\n', n - 1) == NULL);
    json_error_t je;
    json_t *o = json_loadb(line, n - 1, 0, &je);
    TD_FUZZ_CHECK(json_is_object(o));
    json_t *rid = json_object_get(o, "id");
    TD_FUZZ_CHECK(id ? json_equal(rid, id) : json_is_null(rid));
    json_decref(o);
    free(line);
}

static void td__one(const char *line, size_t len)
{
    td_request req;
    const char *cls = NULL;
    char err[512];
    err[0] = '\0';
    int rc = td_request_parse(line, len, &req, &cls, err, sizeof err);
    if (rc == 0) {
        TD_FUZZ_CHECK(cls == NULL && req.cmd && json_is_object(req.args));
        const td_command_rule *c = td_proto_commands;
        while (c->cmd && strcmp(c->cmd, req.cmd) != 0)
            c++;
        TD_FUZZ_CHECK(c->cmd != NULL);
        /* every required argument is there */
        for (const td_arg_rule *r = c->args; r->name; r++)
            TD_FUZZ_CHECK(!r->required || json_object_get(req.args, r->name));
        td__check_reply(td_proto_ok(req.id, json_deep_copy(req.args)), req.id);
    } else {
        TD_FUZZ_CHECK(rc < 0 && cls != NULL && err[0] != '\0');
        td__check_reply(td_proto_error(req.id, cls, err), req.id);
    }
    td_request_free(&req);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t chunk = (size_t)data[0] + 1;
    const char *s = (const char *)data + 1;
    size_t n = size - 1;

    td__one(s, n);

    td_linebuf lb;
    if (td_linebuf_init(&lb, TD__FUZZ_LINE_MAX))
        return 0;
    for (size_t at = 0; at < n;) {
        size_t k = n - at < chunk ? n - at : chunk;
        int rc = td_linebuf_feed(&lb, s + at, k);
        at += k;
        for (;;) {
            const char *line;
            size_t len;
            int r = td_linebuf_next(&lb, &line, &len);
            if (r <= 0) {
                if (r < 0)
                    rc = r;
                break;
            }
            TD_FUZZ_CHECK(len <= TD__FUZZ_LINE_MAX && line[len] == '\0');
            TD_FUZZ_CHECK(memchr(line, '\n', len) == NULL);
            td__one(line, len);
        }
        if (rc == -EMSGSIZE) /* the daemon replies too_large and closes */
            break;
        TD_FUZZ_CHECK(rc == 0);
    }
    td_linebuf_free(&lb);
    return 0;
}
