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
 * Asking for SO_TIMESTAMPING (a send's or a device's stamps) fails (ENOPROTOOPT) rather than succeeding with
 * none: a program waiting for a send's stamp would wait forever.
 *
 * D is read from FAKETIME ("+0 x<1/D>", as emu.net.ranks writes it) once, when the library is loaded, as
 * are the functions it wraps: a SIGALRM handler may call setitimer, and getenv and dlsym are not for
 * handlers. Without FAKETIME (or an 'x' in it) nothing is scaled. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>

/* The kernel's numbers (asm-generic/socket.h, linux/sockios.h), both the old and the 64-bit-time ones. */
static int is_rx_stamp_option(int level, int name) {
    return level == SOL_SOCKET && (name == 29 || name == 35 ||   /* SO_TIMESTAMP{,NS}_OLD */
                                   name == 63 || name == 64);    /* SO_TIMESTAMP{,NS}_NEW */
}

static int is_stamping_option(int level, int name) {
    return level == SOL_SOCKET && (name == 37 || name == 65);   /* SO_TIMESTAMPING_{OLD,NEW} */
}

static int is_stamp_request(unsigned long request) {
    return request == 0x8906 || request == 0x8907 ||              /* SIOCGSTAMP{,NS}_OLD */
           request == 0x80108906UL || request == 0x80108907UL;    /* SIOCGSTAMP{,NS}_NEW */
}

static int (*next_setsockopt)(int, int, int, const void *, socklen_t);
static int (*next_ioctl)(int, unsigned long, ...);
static int (*next_setitimer)(__itimer_which_t, const struct itimerval *, struct itimerval *);
static int (*next_getitimer)(__itimer_which_t, struct itimerval *);
static long double dilation = 1;

/* FAKETIME's rate after its 'x', read without the locale (a program's setlocale may make ',' the decimal
 * point, where strtod would stop at "0.001"'s point and read 0). */
static long double rate_of(const char *spec) {
    const char *x = spec ? strchr(spec, 'x') : NULL;
    long double v = 0, scale = 1;
    int point = 0, digits = 0;
    if (!x)
        return 0;
    for (const char *c = x + 1; *c; c++) {
        if (*c >= '0' && *c <= '9') {
            v = v * 10 + (*c - '0');
            if (point)
                scale *= 10;
            digits++;
        } else if (*c == '.' && !point) {
            point = 1;
        } else {
            break;
        }
    }
    return digits ? v / scale : 0;
}

__attribute__((constructor)) static void load(void) {
    next_setsockopt = (int (*)(int, int, int, const void *, socklen_t))dlsym(RTLD_NEXT, "setsockopt");
    next_ioctl = (int (*)(int, unsigned long, ...))dlsym(RTLD_NEXT, "ioctl");
    next_setitimer = (int (*)(__itimer_which_t, const struct itimerval *, struct itimerval *))dlsym(RTLD_NEXT,
                                                                                                    "setitimer");
    next_getitimer = (int (*)(__itimer_which_t, struct itimerval *))dlsym(RTLD_NEXT, "getitimer");
    long double rate = rate_of(getenv("FAKETIME"));
    dilation = rate > 0 ? 1 / rate : 1;
}

int setsockopt(int fd, int level, int name, const void *value, socklen_t length) {
    if (is_rx_stamp_option(level, name))
        return 0;
    if (is_stamping_option(level, name)) {
        errno = ENOPROTOOPT;
        return -1;
    }
    return next_setsockopt(fd, level, name, value, length);
}

int ioctl(int fd, unsigned long request, ...) {
    va_list ap;
    va_start(ap, request);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    if (is_stamp_request(request)) {
        errno = ENOENT;  /* what the kernel says of a socket that has kept no stamp */
        return -1;
    }
    return next_ioctl(fd, request, arg);
}

static int valid(const struct timeval *tv) {
    return tv->tv_sec >= 0 && tv->tv_usec >= 0 && tv->tv_usec < 1000000;
}

/* tv times `by`, in whole microseconds: up (by > 1) to the nearest, capped where time_t would overflow;
 * down (by < 1) rounded up, so that an armed timer never reads as disarmed (0), as the kernel's never does. */
static void scale(struct timeval *tv, long double by) {
    long double us = ((long double)tv->tv_sec * 1000000 + tv->tv_usec) * by;
    long double most = (long double)(((time_t)1 << (sizeof(time_t) * 8 - 2)) / 1000000) * 1000000;
    if (tv->tv_sec == 0 && tv->tv_usec == 0)
        return;
    us = by < 1 ? ceill(us) : floorl(us + 0.5L);
    if (us > most)
        us = most;
    if (us < 1)
        us = 1;
    tv->tv_sec = (time_t)(us / 1000000);
    tv->tv_usec = (suseconds_t)(us - (long double)tv->tv_sec * 1000000);
}

int setitimer(__itimer_which_t which, const struct itimerval *value, struct itimerval *old) {
    if (which != ITIMER_REAL || value == NULL || dilation == 1 || !valid(&value->it_value) ||
        !valid(&value->it_interval))
        return next_setitimer(which, value, old);  /* the kernel's answer, EINVAL included, unchanged */
    struct itimerval wall = *value;
    scale(&wall.it_value, dilation);
    scale(&wall.it_interval, dilation);
    int r = next_setitimer(which, &wall, old);
    if (r == 0 && old != NULL) {
        scale(&old->it_value, 1 / dilation);
        scale(&old->it_interval, 1 / dilation);
    }
    return r;
}

int getitimer(__itimer_which_t which, struct itimerval *value) {
    int r = next_getitimer(which, value);
    if (r == 0 && which == ITIMER_REAL && value != NULL && dilation != 1) {
        scale(&value->it_value, 1 / dilation);
        scale(&value->it_interval, 1 / dilation);
    }
    return r;
}
