/* test_protocol.c - line framing, request validation, replies, events. */
#include <string.h>

#include "base/error.h"
#include "proto/protocol.h"
#include "tdtest.h"

/* ---- framing ---------------------------------------------------------- */

START_TEST(test_lines_split_and_joined)
{
    td_linebuf lb;
    const char *line;
    size_t len;
    ck_assert_int_eq(td_linebuf_init(&lb, 64), 0);
    ck_assert_int_eq(td_linebuf_feed(&lb, "{\"a\"", 4), 0);
    ck_assert_int_eq(td_linebuf_next(&lb, &line, &len), 0);
    ck_assert_int_eq(td_linebuf_feed(&lb, ":1}\nsecond\r\nthi", 15), 0);
    ck_assert_int_eq(td_linebuf_next(&lb, &line, &len), 1);
    ck_assert_str_eq(line, "{\"a\":1}");
    ck_assert_uint_eq(len, 7);
    ck_assert_int_eq(td_linebuf_next(&lb, &line, &len), 1);
    ck_assert_str_eq(line, "second"); /* CRLF tolerated */
    ck_assert_int_eq(td_linebuf_next(&lb, &line, &len), 0);
    ck_assert_int_eq(td_linebuf_feed(&lb, "rd\n\n", 4), 0);
    ck_assert_int_eq(td_linebuf_next(&lb, &line, &len), 1);
    ck_assert_str_eq(line, "third");
    ck_assert_int_eq(td_linebuf_next(&lb, &line, &len), 1);
    ck_assert_uint_eq(len, 0); /* an empty line is a line */
    ck_assert_int_eq(td_linebuf_next(&lb, &line, &len), 0);
    td_linebuf_free(&lb);
}
END_TEST

START_TEST(test_line_at_cap_accepted)
{
    td_linebuf lb;
    char big[102];
    const char *line;
    size_t len;
    memset(big, 'x', 100);
    big[100] = '\n';
    ck_assert_int_eq(td_linebuf_init(&lb, 100), 0);
    for (int i = 0; i < 3; i++) { /* and again, to test compaction */
        ck_assert_int_eq(td_linebuf_feed(&lb, big, 101), 0);
        ck_assert_int_eq(td_linebuf_next(&lb, &line, &len), 1);
        ck_assert_uint_eq(len, 100);
    }
    td_linebuf_free(&lb);
}
END_TEST

START_TEST(test_line_over_cap_with_newline)
{
    td_linebuf lb;
    char big[103];
    const char *line;
    size_t len;
    memset(big, 'x', 101);
    big[101] = '\n';
    big[102] = 'y';
    ck_assert_int_eq(td_linebuf_init(&lb, 100), 0);
    ck_assert_int_eq(td_linebuf_feed(&lb, big, 103), 0);
    ck_assert_int_eq(td_linebuf_next(&lb, &line, &len), -EMSGSIZE);
    ck_assert_int_eq(td_linebuf_feed(&lb, "ok\n", 3), -EMSGSIZE);
    td_linebuf_free(&lb);
}
END_TEST

START_TEST(test_unterminated_flood_rejected)
{
    td_linebuf lb;
    char chunk[64];
    memset(chunk, 'z', sizeof chunk);
    ck_assert_int_eq(td_linebuf_init(&lb, 1000), 0);
    int rc = 0, fed = 0;
    while (rc == 0 && fed < 100) {
        rc = td_linebuf_feed(&lb, chunk, sizeof chunk);
        fed++;
    }
    ck_assert_int_eq(rc, -EMSGSIZE);
    ck_assert_int_eq(fed, 16); /* 16 * 64 = 1024 > 1000 */
    ck_assert_uint_le(lb.cap, 4096); /* nothing beyond the cap was kept */
    td_linebuf_free(&lb);
}
END_TEST

/* ---- requests --------------------------------------------------------- */

struct bad_case {
    const char *line;
    const char *cls;
    const char *msg; /* a substring of the error */
};

static const struct bad_case bad[] = {
    {"{\"id\":1,\"cmd\":\"version\"", TD_ERR_BAD_REQUEST, "malformed JSON"},
    {"[1,2]", TD_ERR_BAD_REQUEST, "a request is a JSON object"},
    {"{\"id\":1.5,\"cmd\":\"version\"}", TD_ERR_BAD_REQUEST,
     "'id' must be an integer or a string"},
    {"{\"id\":1,\"cmd\":\"version\",\"extra\":true}", TD_ERR_BAD_REQUEST,
     "unknown request key 'extra'"},
    {"{\"id\":1}", TD_ERR_BAD_REQUEST, "'cmd' must be a string"},
    {"{\"id\":1,\"cmd\":\"list\",\"args\":[]}", TD_ERR_BAD_REQUEST,
     "'args' must be an object"},
    {"{\"id\":1,\"cmd\":\"list\",\"cmd\":\"show\"}", TD_ERR_BAD_REQUEST,
     "duplicate"},
    {"{\"id\":1,\"cmd\":\"explode\"}", TD_ERR_UNKNOWN_COMMAND,
     "unknown command 'explode'"},
    {"{\"id\":1,\"cmd\":\"show\",\"args\":{\"job\":1,\"verbose\":true}}",
     TD_ERR_INVALID_ARGS, "show: unknown argument 'verbose'"},
    {"{\"id\":1,\"cmd\":\"show\",\"args\":{\"job\":\"7\"}}",
     TD_ERR_INVALID_ARGS, "show: argument 'job' must be an integer"},
    {"{\"id\":1,\"cmd\":\"cancel\"}", TD_ERR_INVALID_ARGS,
     "cancel: missing argument 'job'"},
    {"{\"id\":1,\"cmd\":\"submit\",\"args\":{\"spec\":\"job.json\"}}",
     TD_ERR_INVALID_ARGS, "submit: argument 'spec' must be an object"},
    {"{\"id\":1,\"cmd\":\"config_set\",\"args\":{\"key\":\"workers\"}}",
     TD_ERR_INVALID_ARGS, "config_set: missing argument 'value'"},
};

START_TEST(test_bad_requests)
{
    td_request req;
    const char *cls;
    char err[256];
    const struct bad_case *c = &bad[_i];
    int rc = td_request_parse(c->line, strlen(c->line), &req, &cls, err,
                              sizeof err);
    ck_assert_int_eq(rc, TD_E_PROTO);
    ck_assert_str_eq(cls, c->cls);
    ck_assert_msg(strstr(err, c->msg), "'%s': got '%s'", c->line, err);
    td_request_free(&req);
}
END_TEST

START_TEST(test_error_keeps_id)
{
    td_request req;
    const char *cls;
    char err[256];
    const char *l = "{\"id\":42,\"cmd\":\"nope\"}";
    ck_assert_int_eq(td_request_parse(l, strlen(l), &req, &cls, err,
                                      sizeof err), TD_E_PROTO);
    ck_assert_ptr_nonnull(req.id);
    char *reply = td_proto_error(req.id, cls, err);
    ck_assert_str_eq(reply, "{\"id\":42,\"error\":{\"class\":\"unknown_command\","
                            "\"desc\":\"unknown command 'nope'\"}}\n");
    free(reply);
    td_request_free(&req);
}
END_TEST

START_TEST(test_error_cut_inside_a_character_still_replied)
{
    /* An unknown command of 300 euro signs (3 bytes each): the message,
     * cut to the daemon's 512-byte buffer, ends inside a character.  The
     * reply was NULL (not UTF-8: json_pack failed), so the daemon sent
     * nothing and the client waited forever. */
    char line[1024], err[512];
    int n = snprintf(line, sizeof line, "{\"id\":5,\"cmd\":\"");
    for (int i = 0; i < 300; i++)
        n += snprintf(line + n, sizeof line - (size_t)n, "\xe2\x82\xac");
    n += snprintf(line + n, sizeof line - (size_t)n, "\"}");
    td_request req;
    const char *cls;
    ck_assert_int_eq(td_request_parse(line, (size_t)n, &req, &cls, err,
                                      sizeof err), TD_E_PROTO);
    ck_assert_uint_eq(strlen(err), sizeof err - 1); /* it was cut */
    char *reply = td_proto_error(req.id, cls, err);
    ck_assert_ptr_nonnull(reply);
    json_t *o = json_loads(reply, 0, NULL);
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(json_integer_value(json_object_get(o, "id")), 5);
    const char *desc = json_string_value(
        json_object_get(json_object_get(o, "error"), "desc"));
    ck_assert_ptr_nonnull(desc);
    ck_assert_int_eq(strncmp(desc, "unknown command '\xe2\x82\xac", 20), 0);
    ck_assert_uint_eq((strlen(desc) - 17) % 3, 0); /* whole characters */
    ck_assert_uint_ge(strlen(desc), sizeof err - 4);
    json_decref(o);
    free(reply);
    td_request_free(&req);
    /* a message invalid elsewhere (a Latin-1 file name) still gets a
     * reply, with the byte as \xNN */
    reply = td_proto_error(NULL, TD_ERR_INTERNAL, "bad \xff byte");
    ck_assert_str_eq(reply, "{\"id\":null,\"error\":{\"class\":\"internal\","
                            "\"desc\":\"bad \\\\xff byte\"}}\n");
    free(reply);
}
END_TEST

START_TEST(test_good_requests)
{
    static const char *good[] = {
        "{\"id\":1,\"cmd\":\"version\"}",
        "{\"cmd\":\"list\"}",
        "{\"id\":\"abc\",\"cmd\":\"list\",\"args\":{\"state\":\"running\"}}",
        "{\"id\":2,\"cmd\":\"submit\",\"args\":{\"spec\":{\"epochs\":1},"
        "\"name\":\"x\"}}",
        "{\"id\":3,\"cmd\":\"show\",\"args\":{\"job\":7}}",
        "{\"id\":4,\"cmd\":\"subscribe\",\"args\":{\"job\":7,\"events\":"
        "[\"step\",\"window\"],\"every_steps\":10}}",
        "{\"id\":5,\"cmd\":\"subscribe\"}",
        "{\"id\":6,\"cmd\":\"config_set\",\"args\":{\"key\":\"workers\","
        "\"value\":4}}",
        "{\"id\":7,\"cmd\":\"config_set\",\"args\":{\"key\":\"log_level\","
        "\"value\":\"debug\"}}",
        "{\"id\":8,\"cmd\":\"logs\",\"args\":{\"job\":1,\"lines\":50}}",
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        td_request req;
        const char *cls;
        char err[256] = "";
        int rc = td_request_parse(good[i], strlen(good[i]), &req, &cls, err,
                                  sizeof err);
        ck_assert_msg(rc == 0, "'%s' rejected: %s", good[i], err);
        ck_assert_ptr_nonnull(req.cmd);
        ck_assert(json_is_object(req.args));
        td_request_free(&req);
    }
}
END_TEST

START_TEST(test_every_command_in_table_parses)
{
    /* Each command with its required arguments filled in is accepted. */
    for (const td_command_rule *c = td_proto_commands; c->cmd; c++) {
        json_t *args = json_object();
        for (const td_arg_rule *r = c->args; r->name; r++) {
            if (!r->required)
                continue;
            json_t *v = r->type == JSON_INTEGER  ? json_integer(1)
                        : r->type == JSON_OBJECT ? json_object()
                        : r->type == JSON_STRING ? json_string("s")
                                                 : json_true();
            json_object_set_new(args, r->name, v);
        }
        json_t *o = json_pack("{s:i, s:s, s:o}", "id", 1, "cmd", c->cmd,
                              "args", args);
        char *s = json_dumps(o, JSON_COMPACT);
        td_request req;
        const char *cls;
        char err[256];
        ck_assert_msg(td_request_parse(s, strlen(s), &req, &cls, err,
                                       sizeof err) == 0,
                      "%s: %s", c->cmd, err);
        ck_assert_str_eq(req.cmd, c->cmd);
        td_request_free(&req);
        free(s);
        json_decref(o);
    }
}
END_TEST

START_TEST(test_too_large)
{
    size_t n = TD_PROTO_LINE_MAX + 1;
    char *big = malloc(n);
    memset(big, ' ', n);
    td_request req;
    const char *cls;
    char err[256];
    ck_assert_int_eq(td_request_parse(big, n, &req, &cls, err, sizeof err),
                     TD_E_PROTO);
    ck_assert_str_eq(cls, TD_ERR_TOO_LARGE);
    td_request_free(&req);
    free(big);
}
END_TEST

/* ---- replies and events ----------------------------------------------- */

START_TEST(test_replies)
{
    json_t *id = json_integer(7);
    char *s = td_proto_ok(id, json_pack("{s:i}", "job", 3));
    ck_assert_str_eq(s, "{\"id\":7,\"ok\":{\"job\":3}}\n");
    free(s);
    s = td_proto_ok(NULL, NULL);
    ck_assert_str_eq(s, "{\"id\":null,\"ok\":{}}\n");
    free(s);
    s = td_proto_error(id, TD_ERR_NOT_FOUND, "no job 9");
    ck_assert_str_eq(s, "{\"id\":7,\"error\":{\"class\":\"not_found\","
                        "\"desc\":\"no job 9\"}}\n");
    free(s);
    json_decref(id);
    s = td_proto_hello("1.2.3", "cpu");
    ck_assert_str_eq(s, "{\"hello\":{\"proto\":1,\"version\":\"1.2.3\","
                        "\"device\":\"cpu\"}}\n");
    free(s);
    s = td_proto_event("step", 1.5, 4, json_pack("{s:i}", "step", 10));
    ck_assert_str_eq(s, "{\"event\":\"step\",\"ts\":1.5,\"job\":4,"
                        "\"data\":{\"step\":10}}\n");
    free(s);
    /* Non-ASCII and control characters are escaped: one line, always. */
    s = td_proto_error(NULL, TD_ERR_INTERNAL, "bad\nline \xc3\xa9");
    ck_assert_ptr_eq(strchr(s, '\n'), s + strlen(s) - 1);
    ck_assert_ptr_nonnull(strstr(s, "bad\\nline \\u00E9"));
    free(s);
}
END_TEST

/* The job states: names to indices and back, and the list people read. */
START_TEST(test_job_states)
{
    char buf[128];
    for (int i = 0; i < TD_PROTO_NJOB_STATES; i++)
        ck_assert_int_eq(td_proto_job_state(td_proto_job_states[i]), i);
    ck_assert_int_eq(td_proto_job_state("bogus"), -1);
    ck_assert_int_eq(td_proto_job_state("Running"), -1);
    ck_assert_int_eq(td_proto_job_state(NULL), -1);
    ck_assert_str_eq(td_proto_job_states_list(buf, sizeof buf),
                     "pending, running, suspended, completed, cancelled, "
                     "failed");
    ck_assert_str_eq(td_proto_job_states_list(buf, 10), "pending, ");
    /* the ended ones: completed, cancelled, failed */
    int ended = 0;
    for (int i = 0; i < TD_PROTO_NJOB_STATES; i++)
        ended += td_proto_job_state_final(td_proto_job_states[i]);
    ck_assert_int_eq(ended, 3);
    ck_assert(td_proto_job_state_final("cancelled"));
    ck_assert(!td_proto_job_state_final("suspended"));
    ck_assert(!td_proto_job_state_final(NULL));
    ck_assert(!td_proto_job_state_final("completedx"));
}
END_TEST

static Suite *protocol_suite(void)
{
    Suite *s = suite_create("protocol");
    TCase *tc = tcase_create("framing");
    tcase_add_test(tc, test_lines_split_and_joined);
    tcase_add_test(tc, test_line_at_cap_accepted);
    tcase_add_test(tc, test_line_over_cap_with_newline);
    tcase_add_test(tc, test_unterminated_flood_rejected);
    suite_add_tcase(s, tc);
    tc = tcase_create("requests");
    tcase_add_loop_test(tc, test_bad_requests, 0,
                        (int)(sizeof bad / sizeof bad[0]));
    tcase_add_test(tc, test_error_keeps_id);
    tcase_add_test(tc, test_error_cut_inside_a_character_still_replied);
    tcase_add_test(tc, test_good_requests);
    tcase_add_test(tc, test_every_command_in_table_parses);
    tcase_add_test(tc, test_too_large);
    suite_add_tcase(s, tc);
    tc = tcase_create("replies");
    tcase_add_test(tc, test_replies);
    tcase_add_test(tc, test_job_states);
    suite_add_tcase(s, tc);
    return s;
}

TD_TEST_MAIN(protocol_suite)
