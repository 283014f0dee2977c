/*
 * test_conns.c - the transport's connection accounting (server/src/transport/conns.c): the cap per
 * listener, the cap per peer over all listeners (IPv4, IPv6, uid and unknown peers are distinct
 * keys), release, requests in flight per connection, and unread connections handed out once
 * they are quiet. No nng, no database.
 *
 * Guards proved: the listener count in srv_conns_admit (test_listener_cap), the peer count over
 * the whole table (test_peer_cap), the decrement in srv_conns_release (test_release), the
 * in-flight bound (test_in_flight), the quiet rule and the once-only hand-out of
 * srv_conns_take_quiet (test_unread_quiet).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "conns.h"

static srv_conn_peer ipv4(uint8_t last)
{
    srv_conn_peer p;
    memset(&p, 0, sizeof p);
    p.family = SRV_CONN_PEER_IPV4;
    p.addr[0] = 127;
    p.addr[3] = last;
    return p;
}

static void test_listener_cap(void **state)
{
    (void)state;
    srv_conns *c = NULL;
    assert_int_equal(srv_conns_new(&c, 2, 3, 10), BF_OK);
    for (uint32_t id = 1; id <= 3; id++) {
        srv_conn_peer p = ipv4((uint8_t)id);
        assert_int_equal(srv_conns_admit(c, id, 0, &p), SRV_CONN_ADMITTED);
    }
    srv_conn_peer p = ipv4(9);
    assert_int_equal(srv_conns_admit(c, 4, 0, &p), SRV_CONN_LISTENER_FULL);
    assert_int_equal(srv_conns_admit(c, 4, 1, &p), SRV_CONN_ADMITTED); /* the other listener */
    assert_int_equal(srv_conns_admit(c, 4, 1, &p), SRV_CONN_DUPLICATE);
    assert_int_equal(srv_conns_admit(c, 0, 1, &p), SRV_CONN_DUPLICATE);
    assert_int_equal(srv_conns_on_listener(c, 0), 3);
    assert_int_equal(srv_conns_on_listener(c, 1), 1);
    assert_int_equal(srv_conns_total(c), 4);
    srv_conns_free(c);
    assert_int_equal(srv_conns_new(&c, 1, 0, 1), BF_ERR_INVALID_ARGUMENT);
    assert_int_equal(srv_conns_new(&c, 1, SRV_CONNS_MAX_PER_LISTENER + 1, 1),
                     BF_ERR_INVALID_ARGUMENT);
}

static void test_peer_cap(void **state)
{
    (void)state;
    srv_conns *c = NULL;
    assert_int_equal(srv_conns_new(&c, 2, 10, 2), BF_OK);
    srv_conn_peer a = ipv4(1), b = ipv4(2);
    assert_int_equal(srv_conns_admit(c, 1, 0, &a), SRV_CONN_ADMITTED);
    assert_int_equal(srv_conns_admit(c, 2, 1, &a), SRV_CONN_ADMITTED);
    assert_int_equal(srv_conns_admit(c, 3, 0, &a), SRV_CONN_PEER_FULL); /* over both listeners */
    assert_int_equal(srv_conns_admit(c, 3, 0, &b), SRV_CONN_ADMITTED);
    /* the same bytes in another family are another peer */
    srv_conn_peer uid;
    memset(&uid, 0, sizeof uid);
    uid.family = SRV_CONN_PEER_UID;
    memcpy(uid.addr, a.addr, 4);
    assert_int_equal(srv_conns_admit(c, 4, 0, &uid), SRV_CONN_ADMITTED);
    /* unknown peers share one key (NULL is unknown too) */
    assert_int_equal(srv_conns_admit(c, 5, 0, NULL), SRV_CONN_ADMITTED);
    srv_conn_peer unknown;
    memset(&unknown, 0, sizeof unknown);
    assert_int_equal(srv_conns_admit(c, 6, 1, &unknown), SRV_CONN_ADMITTED);
    assert_int_equal(srv_conns_admit(c, 7, 1, NULL), SRV_CONN_PEER_FULL);
    assert_int_equal(srv_conns_from_peer(c, &a), 2);
    assert_int_equal(srv_conns_from_peer(c, &unknown), 2);
    srv_conns_free(c);
}

static void test_release(void **state)
{
    (void)state;
    srv_conns *c = NULL;
    assert_int_equal(srv_conns_new(&c, 1, 2, 2), BF_OK);
    srv_conn_peer a = ipv4(1);
    assert_int_equal(srv_conns_admit(c, 10, 0, &a), SRV_CONN_ADMITTED);
    assert_int_equal(srv_conns_admit(c, 11, 0, &a), SRV_CONN_ADMITTED);
    assert_int_equal(srv_conns_admit(c, 12, 0, &a), SRV_CONN_LISTENER_FULL);
    assert_true(srv_conns_release(c, 10));
    assert_false(srv_conns_release(c, 10));
    assert_false(srv_conns_release(c, 12)); /* refused ones were never counted */
    assert_int_equal(srv_conns_admit(c, 12, 0, &a), SRV_CONN_ADMITTED);
    assert_int_equal(srv_conns_begin(c, 11, 1, 4, 0), SRV_CONN_REQUEST_OK); /* 11 moved slots */
    assert_int_equal(srv_conns_begin(c, 10, 1, 4, 0), SRV_CONN_REQUEST_GONE);
    srv_conns_free(c);
}

static void test_in_flight(void **state)
{
    (void)state;
    srv_conns *c = NULL;
    assert_int_equal(srv_conns_new(&c, 1, 4, 4), BF_OK);
    srv_conn_peer a = ipv4(1);
    assert_int_equal(srv_conns_admit(c, 1, 0, &a), SRV_CONN_ADMITTED);
    /* two being served, a third is refused */
    assert_int_equal(srv_conns_begin(c, 1, 2, 4, 0), SRV_CONN_REQUEST_OK);
    assert_int_equal(srv_conns_begin(c, 1, 2, 4, 0), SRV_CONN_REQUEST_OK);
    assert_int_equal(srv_conns_begin(c, 1, 2, 4, 0), SRV_CONN_REQUEST_BUSY);
    srv_conns_end(c, 1, false); /* dropped while served */
    assert_int_equal(srv_conns_begin(c, 1, 2, 4, 0), SRV_CONN_REQUEST_OK);
    srv_conns_end(c, 1, false);
    srv_conns_end(c, 1, false);
    srv_conns_end(c, 99, false); /* unknown: no-op */
    srv_conns_free(c);
}

/* A client that sends one request at a time, whose replies' sends complete late (nng's thread
 * has not run yet): it is served while fewer than max_replying replies lag, with a single
 * count (the one before srv_conns_replying) its third request was dropped. */
static void test_replies_that_complete_late(void **state)
{
    (void)state;
    srv_conns *c = NULL;
    assert_int_equal(srv_conns_new(&c, 1, 4, 4), BF_OK);
    srv_conn_peer a = ipv4(1);
    assert_int_equal(srv_conns_admit(c, 1, 0, &a), SRV_CONN_ADMITTED);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(srv_conns_begin(c, 1, 2, 4, 0), SRV_CONN_REQUEST_OK);
        srv_conns_replying(c, 1); /* served; its send has not completed */
    }
    /* a fifth reply would lag four: a peer that does not read is refused */
    assert_int_equal(srv_conns_begin(c, 1, 2, 4, 0), SRV_CONN_REQUEST_BUSY);
    srv_conns_end(c, 1, true);
    assert_int_equal(srv_conns_begin(c, 1, 2, 4, 0), SRV_CONN_REQUEST_OK);
    srv_conns_replying(c, 99); /* unknown: no-op */
    srv_conns_end(c, 99, true);
    srv_conns_free(c);
}

static void test_unread_quiet(void **state)
{
    (void)state;
    srv_conns *c = NULL;
    assert_int_equal(srv_conns_new(&c, 1, 4, 4), BF_OK);
    srv_conn_peer a = ipv4(1);
    assert_int_equal(srv_conns_admit(c, 1, 0, &a), SRV_CONN_ADMITTED);
    assert_int_equal(srv_conns_admit(c, 2, 0, &a), SRV_CONN_ADMITTED);
    assert_true(srv_conns_mark_unread(c, 1, 1000));
    assert_false(srv_conns_mark_unread(c, 3, 1000));
    uint32_t ids[4];
    assert_int_equal(srv_conns_take_quiet(c, 1500, 1000, ids, 4), 0); /* not quiet yet */
    /* a request from it is refused and keeps it from being quiet */
    assert_int_equal(srv_conns_begin(c, 1, 2, 4, 1800), SRV_CONN_REQUEST_UNREAD);
    assert_int_equal(srv_conns_take_quiet(c, 2500, 1000, ids, 4), 0);
    assert_int_equal(srv_conns_take_quiet(c, 2800, 1000, ids, 4), 1);
    assert_int_equal(ids[0], 1);
    assert_int_equal(srv_conns_take_quiet(c, 9000, 1000, ids, 4), 0); /* handed out once */
    assert_int_equal(srv_conns_begin(c, 2, 2, 4, 9000),
                     SRV_CONN_REQUEST_OK); /* others unaffected */
    /* it keeps its slot until released */
    assert_int_equal(srv_conns_from_peer(c, &a), 2);
    assert_true(srv_conns_release(c, 1));
    assert_int_equal(srv_conns_from_peer(c, &a), 1);
    srv_conns_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_listener_cap),
        cmocka_unit_test(test_peer_cap),
        cmocka_unit_test(test_release),
        cmocka_unit_test(test_in_flight),
        cmocka_unit_test(test_replies_that_complete_late),
        cmocka_unit_test(test_unread_quiet),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
