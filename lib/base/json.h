/* json.h - small helpers over jansson shared by every parser of JSON from
 * outside (the protocol, job specs, model graphs).  Owns only wording:
 * one name per JSON type, so every error message says it the same way. */
#ifndef TD_JSON_H
#define TD_JSON_H

#include <jansson.h>

/* "an object", "an array", "a string", "an integer", "a number",
 * "true or false" (JSON_TRUE and JSON_FALSE), "null". */
const char *td_json_type_name(json_type t);

#endif
