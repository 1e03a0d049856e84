/* mapcopy.c - see mapcopy.h. */
#include "base/mapcopy.h"

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <string.h>

#include "base/error.h"

/* The copy this thread is in, if any.  Read by the handler on the same
 * thread: the fault is synchronous, raised by the copy itself. */
static __thread sigjmp_buf *volatile td__active;
static struct sigaction td__prev;
static pthread_once_t td__once = PTHREAD_ONCE_INIT;

static void td__on_sigbus(int sig, siginfo_t *si, void *uc)
{
    sigjmp_buf *jb = td__active;
    if (jb) {
        td__active = NULL;
        siglongjmp(*jb, 1);
    }
    /* Not a guarded copy: put back what was there and return, so that the
     * faulting instruction runs again under it (by default the process
     * dies with the signal, as it would have without us). */
    sigaction(SIGBUS, &td__prev, NULL);
    (void)sig;
    (void)si;
    (void)uc;
}

static void td__install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = td__on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &td__prev);
}

int td_map_copy(void *dst, const void *src, size_t n)
{
    sigjmp_buf jb;
    pthread_once(&td__once, td__install);
    /* The mask saved and restored: SIGBUS is blocked in the handler, and
     * left blocked after its siglongjmp a second fault would kill (one
     * sigprocmask per copy, well under a microsecond). */
    if (sigsetjmp(jb, 1))
        return TD_E_SHRUNK;
    td__active = &jb;
    memcpy(dst, src, n);
    td__active = NULL;
    return 0;
}
