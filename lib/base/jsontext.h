/* jsontext.h - JSON text with reals in their shortest exact form. */
#ifndef TD_BASE_JSONTEXT_H
#define TD_BASE_JSONTEXT_H

#include <stddef.h>

#include <jansson.h>

/* json_dumps(o, flags), then every real rewritten to the fewest digits
 * that read back to the same double (0.35, not 0.34999999999999998).
 * malloc'd; NULL on failure. */
char *td_json_dumps(const json_t *o, size_t flags);

#endif
