/*
 * test_bounded.c - bf_bounded_run (common/src/bounded.c), the bound on a call that may never
 * return (nng 1.5.2's wedged nng_close; client.c bfc_close and the daemon's stop use it). The
 * calls here wait on a condition the test sets, never on time; the bound is the only clock.
 *
 * Cases and the guard each proves:
 * - test_returns_in_time: a call that returns is waited for (true), runs exactly once, and its
 *   argument is not released (it is the caller's again).
 * - test_abandons_after_the_bound: a call held by the test makes bf_bounded_run return false
 *   after the bound, with the call still running and nothing released; once the test lets it go,
 * release receives the argument exactly once (the abandoned thread's duty: without it the argument
 * leaks or, if the caller freed it, the call would use freed memory).
 * - test_release_may_be_null: an abandoned call without release ends without touching it.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <cmocka.h>

#include "buzz/bounded.h"

typedef struct held {
    pthread_mutex_t mtx;
    pthread_cond_t cond;
    bool hold;     /* the call waits while this is set */
    bool entered;  /* the call has started */
    int calls;     /* times call ran */
    int released;  /* times release ran */
    bool finished; /* release ran (or, without release, the call returned) */
} held;

static void held_init(held *h, bool hold)
{
    pthread_mutex_init(&h->mtx, NULL);
    pthread_cond_init(&h->cond, NULL);
    h->hold = hold;
    h->entered = false;
    h->calls = 0;
    h->released = 0;
    h->finished = false;
}

static void held_call(void *arg)
{
    held *h = arg;
    pthread_mutex_lock(&h->mtx);
    h->calls++;
    h->entered = true;
    pthread_cond_broadcast(&h->cond);
    while (h->hold)
        pthread_cond_wait(&h->cond, &h->mtx);
    pthread_mutex_unlock(&h->mtx);
}

static void held_call_then_mark(void *arg)
{
    held_call(arg);
    held *h = arg;
    pthread_mutex_lock(&h->mtx);
    h->finished = true;
    pthread_cond_broadcast(&h->cond);
    pthread_mutex_unlock(&h->mtx);
}

static void held_release(void *arg)
{
    held *h = arg;
    pthread_mutex_lock(&h->mtx);
    h->released++;
    h->finished = true;
    pthread_cond_broadcast(&h->cond);
    pthread_mutex_unlock(&h->mtx);
}

/* Let the call return and wait (at most 30 s: a guard that is gone must fail the test, not hang
 * it) until release ran, or the call returned when there is no release. */
static bool held_let_go_and_wait(held *h)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 30;
    pthread_mutex_lock(&h->mtx);
    h->hold = false;
    pthread_cond_broadcast(&h->cond);
    while (!h->finished && pthread_cond_timedwait(&h->cond, &h->mtx, &until) == 0)
        ;
    bool finished = h->finished;
    pthread_mutex_unlock(&h->mtx);
    return finished;
}

/* Wait until the call has started (it runs on its own thread, maybe after the bound). */
static void held_wait_entered(held *h)
{
    pthread_mutex_lock(&h->mtx);
    while (!h->entered)
        pthread_cond_wait(&h->cond, &h->mtx);
    pthread_mutex_unlock(&h->mtx);
}

static void test_returns_in_time(void **state)
{
    (void)state;
    held h;
    held_init(&h, false);
    assert_true(bf_bounded_run(held_call, held_release, &h, 10000));
    assert_int_equal(h.calls, 1);
    assert_int_equal(h.released, 0);
}

static void test_abandons_after_the_bound(void **state)
{
    (void)state;
    static held h; /* outlives the call: the abandoned thread reaches it after we return */
    held_init(&h, true);
    assert_false(bf_bounded_run(held_call, held_release, &h, 50));
    held_wait_entered(&h);
    pthread_mutex_lock(&h.mtx);
    int released = h.released;
    pthread_mutex_unlock(&h.mtx);
    assert_int_equal(released, 0); /* not while the call still runs */
    if (!held_let_go_and_wait(&h))
        fail_msg("the call returned, and its argument was never released");
    assert_int_equal(h.calls, 1);
    assert_int_equal(h.released, 1);
}

static void test_release_may_be_null(void **state)
{
    (void)state;
    static held h;
    held_init(&h, true);
    assert_false(bf_bounded_run(held_call_then_mark, NULL, &h, 20));
    assert_true(held_let_go_and_wait(&h));
    assert_int_equal(h.calls, 1);
    assert_int_equal(h.released, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_returns_in_time),
        cmocka_unit_test(test_abandons_after_the_bound),
        cmocka_unit_test(test_release_may_be_null),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
