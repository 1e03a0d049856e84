/* json.h - small helpers over jansson shared by every parser of JSON from
 * outside (the protocol, job specs, model graphs).  Owns only wording:
 * one name per JSON type, so every error message says it the same way. */
#ifndef TD_JSON_H
#define TD_JSON_H

#include <jansson.h>

/* "an object", "an array", "a string", "an integer", "a number",
 * "true or false" (JSON_TRUE and JSON_FALSE), "null". */
const char *td_json_type_name(json_type t);

/* The length of the valid UTF-8 sequence at s (n bytes left: 1 to 4), or
 * 0 when it is not one (a stray or missing continuation byte, an overlong
 * form, a surrogate, past U+10FFFF). */
int td_utf8_seq(const unsigned char *s, size_t n);

/* Copies the n bytes at s into out (cap >= 1 bytes, NUL-terminated),
 * each byte that is not part of a valid UTF-8 sequence as \xNN, and stops
 * before a sequence or escape that would not fit.  Returns how many bytes
 * of s it took (n: all), and in *olen the length written. */
size_t td_utf8_escape(const char *s, size_t n, char *out, size_t cap,
                      size_t *olen);

/* A JSON string of text that may hold bytes that are not UTF-8 (a Latin-1
 * file name in an error message: jansson refuses the text whole, and
 * json_pack then returns NULL): as it is when it is UTF-8, else with each
 * such byte as \xNN.  NULL only when out of memory. */
json_t *td_json_text(const char *s);

#endif
