/* fuzz.h - what the libFuzzer targets in tests/fuzz share.
 *
 * Each fuzz_<target>.c defines LLVMFuzzerTestOneInput for one parser of
 * bytes from outside the daemon and checks, besides the sanitizers, the
 * promises its header makes (a reply is one JSON line, a spec reparses to
 * the same hash, a sample lies inside its shard, ...).  A broken promise
 * is a crash (TD_FUZZ_CHECK aborts), so libFuzzer keeps the input.
 * Test-only code: may abort.  Never: writes outside $TMPDIR or keeps state
 * between inputs that could make a crash depend on the inputs before it.
 */
#ifndef TD_FUZZ_H
#define TD_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define TD_FUZZ_CHECK(cond)                                                  \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "%s:%d: broken promise: %s\n", __FILE__,         \
                    __LINE__, #cond);                                        \
            abort();                                                         \
        }                                                                    \
    } while (0)

/* Puts data into an anonymous in-memory file and writes a path that opens
 * it ("/proc/self/fd/N") into path.  Returns the descriptor (the caller
 * closes it), aborts on failure. */
int td_fuzz_memfile(const uint8_t *data, size_t size, char *path, size_t cap);

/* Writes data to path (created or truncated); aborts on failure. */
void td_fuzz_write(const char *path, const void *data, size_t size);

/* A directory of this process's own under $TMPDIR (or /tmp), made on the
 * first call and removed at exit. */
const char *td_fuzz_tmpdir(void);

/* Reads the whole of [p, p + n) so that a pointer past a mapping faults
 * here, where the stack names the reader; returns a checksum. */
unsigned td_fuzz_touch(const uint8_t *p, size_t n);

/* The model fuzz_weights loads a job's init into, and make_seeds writes
 * its weights seeds for: every kind with a parameter or running
 * statistic, on 2 x 9 x 9 inputs with 3 classes. */
#define TD_FUZZ_GRAPH                                                        \
    "{\"name\":\"fz\",\"layers\":["                                         \
    "{\"type\":\"conv2d\",\"name\":\"c1\",\"channels\":4,\"kernel\":3,"     \
    "\"pad\":1,\"bias\":true},{\"type\":\"batchnorm\",\"name\":\"b1\"},"     \
    "{\"type\":\"relu\",\"name\":\"r1\"},{\"type\":\"maxpool\",\"name\":"   \
    "\"mp\",\"kernel\":3,\"stride\":2,\"pad\":1},"                           \
    "{\"type\":\"global_avgpool\",\"name\":\"gp\"},"                         \
    "{\"type\":\"dense\",\"name\":\"d1\",\"units\":5},"                      \
    "{\"type\":\"dense\",\"name\":\"d2\",\"units\":\"classes\"}]}"
#define TD_FUZZ_GRAPH_IN {2, 9, 9}
#define TD_FUZZ_GRAPH_CLASSES 3

#endif
