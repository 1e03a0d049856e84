/* ThreadSanitizer builds only: make libuv's descriptor closes visible.
 *
 * Debian's libuv is not instrumented and closes descriptors with
 * syscall(SYS_close, fd) (uv__close_nocancel), which ThreadSanitizer's
 * close() interceptor never sees.  TSan then still thinks the loop owns
 * the number, and when the kernel hands it back to another thread (the
 * trainer opening a checkpoint folder, a decode worker opening a file),
 * it reports a race between that open and the loop's last read(),
 * accept4() or epoll_ctl() on the old socket: descriptor-number reuse,
 * never shared memory.
 *
 * An executable's own definition of syscall() interposes the one in libc
 * for every shared library, libuv included.  This one sends SYS_close
 * through close(), so TSan records the close (and its happens-before
 * edge) exactly where the kernel does it, and forwards every other
 * system call, unchanged, to libc's syscall().  meson.build compiles it
 * into the daemon and the tests only when b_sanitize has 'thread'; no
 * shipped binary contains it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <sys/syscall.h>
#include <unistd.h>

long syscall(long number, ...)
{
    static long (*real)(long, ...);
    va_list ap;
    long a[6];

    va_start(ap, number);
    for (int i = 0; i < 6; i++) /* the kernel takes at most six */
        a[i] = va_arg(ap, long);
    va_end(ap);
    if (number == SYS_close)
        return close((int)a[0]);
    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "syscall"); /* POSIX's idiom */
    return real(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}
