/* Preloaded into a rank after libfaketime (emu.net.ranks.fabric_time_env): the two ways a program meets
 * the wall's time that libfaketime leaves alone, brought to fabric time too. Both seen in ping at D = 1000.
 *
 * - The kernel's stamps on received packets (SO_TIMESTAMP and its kin, SIOCGSTAMP) keep the wall's clock,
 *   so a program that measures "sent at my clock, received at the kernel's" mixes the two: ping's RTT read
 *   2002, 4000, 5998 ms for a 0.4 ms round trip, growing with the wall. Asking for stamps succeeds and turns
 *   none on, and asking for a socket's last stamp fails as it does where none was kept, so the program
 *   takes the time itself when it reads the packet: through libc, dilated. What that costs: the time a
 *   packet waits in the socket before the program reads it counts in its figure (the stamp left it out).
 * - setitimer's real-time timer (ITIMER_REAL, SIGALRM) runs D times too fast: ping waits for its last
 *   reply with one, and left before the reply came. Its times are multiplied by D going in and divided
 *   coming out (getitimer, the old value), as libfaketime does for alarm and timer_settime. The CPU-time
 *   timers (ITIMER_VIRTUAL, ITIMER_PROF) are left as they are: CPU time is not dilated.
 *
 * D is read from FAKETIME ("+0 x<1/D>", as emu.net.ranks writes it); without it nothing is scaled. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>

/* The kernel's numbers (asm-generic/socket.h, linux/sockios.h), both the old and the 64-bit-time ones. */
static int is_stamp_option(int level, int name) {
    return level == SOL_SOCKET && (name == 29 || name == 35 || name == 37 ||  /* SO_TIMESTAMP{,NS,ING}_OLD */
                                   name == 63 || name == 64 || name == 65);   /* SO_TIMESTAMP{,NS,ING}_NEW */
}

static int is_stamp_request(unsigned long request) {
    return request == 0x8906 || request == 0x8907 ||              /* SIOCGSTAMP{,NS}_OLD */
           request == 0x80108906UL || request == 0x80108907UL;    /* SIOCGSTAMP{,NS}_NEW */
}

int setsockopt(int fd, int level, int name, const void *value, socklen_t length) {
    static int (*next)(int, int, int, const void *, socklen_t);
    if (is_stamp_option(level, name))
        return 0;
    if (!next)
        next = (int (*)(int, int, int, const void *, socklen_t))dlsym(RTLD_NEXT, "setsockopt");
    return next(fd, level, name, value, length);
}

int ioctl(int fd, unsigned long request, ...) {
    static int (*next)(int, unsigned long, ...);
    va_list ap;
    va_start(ap, request);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    if (is_stamp_request(request)) {
        errno = ENOENT;  /* what the kernel says of a socket that has kept no stamp */
        return -1;
    }
    if (!next)
        next = (int (*)(int, unsigned long, ...))dlsym(RTLD_NEXT, "ioctl");
    return next(fd, request, arg);
}

/* D from FAKETIME's rate, "x<1/D>"; 1 where there is none. */
static long double dilation(void) {
    const char *spec = getenv("FAKETIME");
    const char *x = spec ? strchr(spec, 'x') : NULL;
    long double rate = x ? strtold(x + 1, NULL) : 0;
    return rate > 0 ? 1 / rate : 1;
}

static void scale(struct timeval *tv, long double by) {
    long double us = ((long double)tv->tv_sec * 1000000 + tv->tv_usec) * by + 0.5L;
    tv->tv_sec = (time_t)(us / 1000000);
    tv->tv_usec = (suseconds_t)(us - (long double)tv->tv_sec * 1000000);
    if (tv->tv_usec >= 1000000) { tv->tv_sec += 1; tv->tv_usec -= 1000000; }
    if (tv->tv_usec < 0) tv->tv_usec = 0;
}

int setitimer(__itimer_which_t which, const struct itimerval *value, struct itimerval *old) {
    static int (*next)(__itimer_which_t, const struct itimerval *, struct itimerval *);
    if (!next)
        next = (int (*)(__itimer_which_t, const struct itimerval *, struct itimerval *))dlsym(RTLD_NEXT, "setitimer");
    if (which != ITIMER_REAL || value == NULL)
        return next(which, value, old);
    long double d = dilation();
    struct itimerval wall = *value;
    scale(&wall.it_value, d);
    scale(&wall.it_interval, d);
    int r = next(which, &wall, old);
    if (r == 0 && old != NULL) {
        scale(&old->it_value, 1 / d);
        scale(&old->it_interval, 1 / d);
    }
    return r;
}

int getitimer(__itimer_which_t which, struct itimerval *value) {
    static int (*next)(__itimer_which_t, struct itimerval *);
    if (!next)
        next = (int (*)(__itimer_which_t, struct itimerval *))dlsym(RTLD_NEXT, "getitimer");
    int r = next(which, value);
    if (r == 0 && which == ITIMER_REAL && value != NULL) {
        long double d = dilation();
        scale(&value->it_value, 1 / d);
        scale(&value->it_interval, 1 / d);
    }
    return r;
}
