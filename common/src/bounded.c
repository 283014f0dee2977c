/*
 * bounded.c - a call on its own thread that the caller stops waiting for after a bound
 * (see buzz/bounded.h).
 */
#include "buzz/bounded.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

typedef struct bounded {
    void (*call)(void *arg);
    void (*release)(void *arg);
    void *arg;
    pthread_mutex_t mtx;
    pthread_cond_t cond; /* on CLOCK_MONOTONIC: a clock step must not stretch the bound */
    bool done, abandoned;
} bounded;

static void bounded_free(bounded *b)
{
    pthread_cond_destroy(&b->cond);
    pthread_mutex_destroy(&b->mtx);
    free(b);
}

static void *bounded_main(void *p)
{
    bounded *b = p;
    b->call(b->arg);
    pthread_mutex_lock(&b->mtx);
    b->done = true;
    bool orphan = b->abandoned;
    pthread_cond_signal(&b->cond);
    pthread_mutex_unlock(&b->mtx);
    if (orphan) { /* the caller went on: what it gave is ours to free */
        if (b->release != NULL)
            b->release(b->arg);
        bounded_free(b);
    }
    return NULL;
}

/* The shared state with its mutex and its monotonic condition variable; NULL when any of them
 * cannot be had. */
static bounded *bounded_new(void (*call)(void *), void (*release)(void *), void *arg)
{
    bounded *b = calloc(1, sizeof *b);
    if (b == NULL)
        return NULL;
    pthread_condattr_t attr;
    bool ok = pthread_condattr_init(&attr) == 0;
    bool cond = ok && pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) == 0 &&
                pthread_cond_init(&b->cond, &attr) == 0;
    if (ok)
        pthread_condattr_destroy(&attr);
    if (!cond || pthread_mutex_init(&b->mtx, NULL) != 0) {
        if (cond)
            pthread_cond_destroy(&b->cond);
        free(b);
        return NULL;
    }
    b->call = call;
    b->release = release;
    b->arg = arg;
    return b;
}

bool bf_bounded_run(void (*call)(void *arg), void (*release)(void *arg), void *arg, int bound_ms)
{
    bounded *b = bounded_new(call, release, arg);
    pthread_t thread;
    if (b == NULL || pthread_create(&thread, NULL, bounded_main, b) != 0) {
        if (b != NULL)
            bounded_free(b);
        call(arg); /* no thread to run it on: unbounded, as a plain call would be */
        return true;
    }
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    long ms = bound_ms < 0 ? 0 : bound_ms;
    until.tv_sec += ms / 1000;
    until.tv_nsec += (ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&b->mtx);
    while (!b->done && pthread_cond_timedwait(&b->cond, &b->mtx, &until) != ETIMEDOUT)
        ;
    bool done = b->done;
    b->abandoned = !done;
    pthread_mutex_unlock(&b->mtx);
    if (done) {
        pthread_join(thread, NULL);
        bounded_free(b);
    } else {
        pthread_detach(thread);
    }
    return done;
}
