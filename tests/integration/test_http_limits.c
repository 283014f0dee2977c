/*
 * test_http_limits.c - the HTTP listener (server/src/http/http.c) against peers that abuse it:
 * floods of half-sent requests, a slowloris, an oversized request head, under a low descriptor
 * limit. Real daemons (tests/support/daemon.h) and raw sockets (tests/support/sp_peer.h, without
 * the SP handshake).
 *
 * Guards proved (each removal fails a test here):
 * - test_flood_of_half_sent_requests: the cap per peer (SRV_HTTP_MAX_PER_PEER in http_accept)
 *   and the cap per listener (SRV_HTTP_MAX_CONNECTIONS): a flood beyond them is closed as it
 *   arrives, and admin ipc, admin tcp, /livez and /readyz still answer.
 * - test_descriptor_budget: http_budget (a SRV_HTTP_FD_SHARE-th of the descriptor limit): under
 *   a low limit the listener holds no more than its share, and the admin listeners keep theirs.
 * - test_slowloris_is_closed: the header deadline (SRV_HTTP_HEADER_TIMEOUT_MS, http_expire): a
 *   peer that trickles header lines is closed within the deadline and a bounded slack.
 * - test_oversized_head: the head bound (SRV_HTTP_HEAD_MAX in http_conn_read): 431.
 *
 * Steps wait on observable conditions (a socket closed by the daemon, an answer), polled with
 * deadlines derived from the configured limits; nothing is ordered by sleeping.
 */
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon.h"
#include "http.h"
#include "http_get.h"
#include "sp_peer.h"

#define HOST    "127.0.0.1"
#define WAIT_MS 20000
#define SLACK   2000 /* ms the daemon may take beyond a deadline on a loaded machine */
#define HALF    "GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n" /* never finished */

static PGconn *pg;
static bd_daemon daemon_;
static int http_port;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void start(void)
{
    if (daemon_.pid > 0)
        bd_kill(&daemon_); /* left by a failed test */
    bd_options o = bd_defaults();
    o.workers = 0;
    o.log_level = "info";
    http_port = bd_free_port();
    static char extra[96];
    snprintf(extra, sizeof extra, "http_listen = http://127.0.0.1:%d\n", http_port);
    o.extra = extra;
    bd_start(&daemon_, &o);
    for (int i = 0; i < 1000; i++) {
        th_response r = th_request("GET", HOST, http_port, "/livez", 1000);
        int st = r.status;
        th_response_fini(&r);
        if (st == 200)
            return;
        bd_sleep_ms(10);
    }
    fail_msg("the HTTP listener did not answer within 10 s; see %s", daemon_.log);
}

static int daemon_fds(void)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/fd", (long)daemon_.pid);
    DIR *d = opendir(path);
    if (d == NULL)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static void set_daemon_fd_limit(rlim_t n)
{
    struct rlimit lim = {n, n};
    assert_int_equal(prlimit(daemon_.pid, RLIMIT_NOFILE, &lim, NULL), 0);
}

/* Half-sent requests from src: n connections, each sent HALF and nothing more. */
static void flood(sp_peer *peers, int n, const char *src)
{
    for (int i = 0; i < n; i++) {
        peers[i] = sp_tcp(http_port, src, false);
        (void)send(peers[i].fd, HALF, strlen(HALF), MSG_NOSIGNAL);
    }
}

/* Wait until exactly want of peers[0..n) are open (the rest closed by the daemon), within the
 * header deadline of the first: after it the daemon closes them all anyway. */
static void wait_open(const sp_peer *peers, int n, int want, int64_t since, const char *what)
{
    int open = sp_open_count(peers, (size_t)n);
    while (open != want) {
        if (now_ms() - since > SRV_HTTP_HEADER_TIMEOUT_MS - 500)
            fail_msg("%s: %d of %d half-sent requests stay open, %d expected; see %s", what, open,
                     n, want, daemon_.log);
        struct pollfd pfd = {.fd = -1};
        (void)poll(&pfd, 0, 20);
        open = sp_open_count(peers, (size_t)n);
    }
}

static void expect_admin(const char *what)
{
    Buzz__Backfill__V1__WhoAmIRequest req = BUZZ__BACKFILL__V1__WHO_AM_IREQUEST__INIT;
    const char *urls[] = {daemon_.ipc_url, daemon_.tcp_url};
    const char *tokens[] = {NULL, bd_token(BFT_CAP_READ)};
    for (int i = 0; i < 2; i++) {
        bfc_client *c = bd_client(urls[i], tokens[i], 2000, -1);
        int code = bd_call(c, &buzz__backfill__v1__admin__descriptor, "WhoAmI", &req.base, NULL);
        bfc_close(c);
        if (code != BD_SC(OK))
            fail_msg("%s: WhoAmI on %s got %d; see %s", what, urls[i], code, daemon_.log);
    }
}

static void expect_http(const char *what)
{
    th_response r = th_request("GET", HOST, http_port, "/livez", 2000);
    if (r.status != 200)
        fail_msg("%s: /livez answered %d", what, r.status);
    th_response_fini(&r);
    r = th_request("GET", HOST, http_port, "/readyz", 5000);
    if ((r.status != 200 && r.status != 503) || strstr(r.body, "\"status\"") == NULL)
        fail_msg("%s: /readyz answered %d %.80s", what, r.status, r.body);
    th_response_fini(&r);
}

/* Close the flood; the listener takes connections again once the daemon has seen them go. */
static void close_all(sp_peer *peers, int n)
{
    for (int i = 0; i < n; i++)
        close(peers[i].fd);
    int64_t until = now_ms() + SLACK;
    for (;;) {
        th_response r = th_request("GET", HOST, http_port, "/livez", 1000);
        int st = r.status;
        th_response_fini(&r);
        if (st == 200)
            return;
        if (now_ms() > until)
            fail_msg("/livez answers %d %d ms after the flood closed", st, SLACK);
        struct pollfd pfd = {.fd = -1};
        (void)poll(&pfd, 0, 20);
    }
}

/* ---- the tests ---------------------------------------------------------------------------- */

/* Under the 1,024-descriptor limit of the issue: three peers flood far beyond the cap per peer,
 * then many more peers beyond the listener's cap. What is held stays within the caps, and the
 * admin listeners, /livez and /readyz answer throughout. */
static void test_flood_of_half_sent_requests(void **state)
{
    (void)state;
    enum { HEAVY = 3, PER_HEAVY = 100, LIGHT = 24 };
    start();
    set_daemon_fd_limit(1024);
    static sp_peer peers[HEAVY * PER_HEAVY + LIGHT * SRV_HTTP_MAX_PER_PEER];
    int64_t t0 = now_ms();
    for (int s = 0; s < HEAVY; s++) {
        char src[32];
        snprintf(src, sizeof src, "127.0.0.%d", s + 2);
        flood(&peers[s * PER_HEAVY], PER_HEAVY, src);
    }
    wait_open(peers, HEAVY * PER_HEAVY, HEAVY * SRV_HTTP_MAX_PER_PEER, t0, "per peer");
    expect_http("beside three flooding peers");
    expect_admin("beside three flooding peers");
    /* many peers, each within its own cap, together beyond the listener's */
    int n = HEAVY * PER_HEAVY;
    for (int s = 0; s < LIGHT; s++) {
        char src[32];
        snprintf(src, sizeof src, "127.0.1.%d", s + 2);
        flood(&peers[n], SRV_HTTP_MAX_PER_PEER, src);
        n += SRV_HTTP_MAX_PER_PEER;
    }
    wait_open(peers, n, SRV_HTTP_MAX_CONNECTIONS, t0, "per listener");
    for (int s = 0; s < HEAVY; s++)
        assert_int_equal(sp_open_count(&peers[s * PER_HEAVY], PER_HEAVY), SRV_HTTP_MAX_PER_PEER);
    assert_true(bd_log_contains(&daemon_, "http: refused"));
    expect_admin("with the HTTP listener full");
    /* a further connection is refused at once */
    sp_peer late = sp_tcp(http_port, NULL, false);
    int64_t until = now_ms() + WAIT_MS;
    while (!sp_closed_by_daemon(&late)) {
        if (now_ms() > until)
            fail_msg("a connection beyond the cap was held; see %s", daemon_.log);
        struct pollfd pfd = {.fd = late.fd, .events = POLLRDHUP};
        (void)poll(&pfd, 1, 50);
    }
    close(late.fd);
    close_all(peers, n);
    expect_http("after the flood");
    bd_stop(&daemon_);
}

/* Under a descriptor limit too low for the listener's cap, it holds only its share of the limit,
 * and the admin listeners still have descriptors to answer with. */
static void test_descriptor_budget(void **state)
{
    (void)state;
    enum { SOURCES = 16 };
    start();
    int idle = daemon_fds();
    rlim_t limit = (rlim_t)idle + 48;
    int share = (int)(limit / SRV_HTTP_FD_SHARE);
    if (share >= SRV_HTTP_MAX_CONNECTIONS || share >= 48)
        fail_msg("an idle daemon holds %d descriptors: the share %d would not bind", idle, share);
    set_daemon_fd_limit(limit);
    static sp_peer peers[SOURCES * SRV_HTTP_MAX_PER_PEER];
    int64_t t0 = now_ms();
    for (int s = 0; s < SOURCES; s++) {
        char src[32];
        snprintf(src, sizeof src, "127.0.2.%d", s + 2);
        flood(&peers[s * SRV_HTTP_MAX_PER_PEER], SRV_HTTP_MAX_PER_PEER, src);
    }
    wait_open(peers, SOURCES * SRV_HTTP_MAX_PER_PEER, share, t0, "descriptor share");
    expect_admin("with the HTTP listener at its descriptor share");
    close_all(peers, SOURCES * SRV_HTTP_MAX_PER_PEER);
    expect_http("after the flood");
    bd_stop(&daemon_);
}

/* A peer that sends a header line every 250 ms is closed at the header deadline: not before it
 * (minus the clock's slack), and not later than the slack after it. */
static void test_slowloris_is_closed(void **state)
{
    (void)state;
    start();
    sp_peer p = sp_tcp(http_port, NULL, false);
    int64_t t0 = now_ms();
    (void)send(p.fd, HALF, strlen(HALF), MSG_NOSIGNAL);
    int64_t took = -1;
    while (took < 0) {
        struct pollfd pfd = {.fd = p.fd, .events = POLLRDHUP};
        (void)poll(&pfd, 1, 250);
        if (sp_closed_by_daemon(&p))
            took = now_ms() - t0;
        else if (now_ms() - t0 > SRV_HTTP_HEADER_TIMEOUT_MS + SLACK)
            fail_msg("a slowloris is still open after %lld ms (header deadline %d ms)",
                     (long long)(now_ms() - t0), SRV_HTTP_HEADER_TIMEOUT_MS);
        else
            (void)send(p.fd, "X-Slow: 1\r\n", 11, MSG_NOSIGNAL);
    }
    if (took < SRV_HTTP_HEADER_TIMEOUT_MS - 100)
        fail_msg("the slowloris was closed after %lld ms, before the deadline", (long long)took);
    char buf[256] = "";
    ssize_t n = recv(p.fd, buf, sizeof buf - 1, MSG_DONTWAIT);
    if (n > 0 && strncmp(buf, "HTTP/1.1 408", 12) != 0)
        fail_msg("the slowloris got %.40s", buf);
    close(p.fd);
    expect_http("after the slowloris");
    bd_stop(&daemon_);
}

/* A request whose head is pad bytes of one header long; its status (-1: none). */
static int padded_request(size_t pad)
{
    sp_peer p = sp_tcp(http_port, NULL, false);
    const char *start_ = "GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: ";
    size_t len = strlen(start_) + pad + 4;
    char *req = malloc(len + 1);
    assert_non_null(req);
    snprintf(req, len + 1, "%s%*s\r\n\r\n", start_, (int)pad, "");
    memset(req + strlen(start_), 'a', pad);
    size_t off = 0;
    int64_t until = now_ms() + WAIT_MS;
    while (off < len && now_ms() < until) {
        ssize_t n = send(p.fd, req + off, len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0)
            off += (size_t)n;
        else if (sp_closed_by_daemon(&p))
            break;
        struct pollfd pfd = {.fd = p.fd, .events = POLLOUT};
        (void)poll(&pfd, 1, 50);
    }
    free(req);
    char buf[64] = "";
    size_t got = 0;
    while (got < sizeof buf - 1 && now_ms() < until) {
        struct pollfd pfd = {.fd = p.fd, .events = POLLIN};
        if (poll(&pfd, 1, 100) <= 0)
            continue;
        ssize_t n = recv(p.fd, buf + got, sizeof buf - 1 - got, 0);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(p.fd);
    int status = -1;
    buf[got] = '\0';
    sscanf(buf, "HTTP/1.%*d %d", &status);
    return status;
}

static void test_oversized_head(void **state)
{
    (void)state;
    start();
    assert_int_equal(padded_request(SRV_HTTP_HEAD_MAX - 200), 200); /* within the bound */
    assert_int_equal(padded_request(SRV_HTTP_HEAD_MAX), 431);
    assert_int_equal(padded_request(4 * SRV_HTTP_HEAD_MAX), 431);
    expect_http("after the oversized heads");
    bd_stop(&daemon_);
}

/* ---- fixture ------------------------------------------------------------------------------ */

static int group_setup(void **state)
{
    (void)state;
    signal(SIGPIPE, SIG_IGN);
    struct rlimit lim;
    if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
        lim.rlim_cur = lim.rlim_max; /* the flood's sockets */
        (void)setrlimit(RLIMIT_NOFILE, &lim);
    }
    pg = bd_suite_open("httplimits");
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    bd_suite_close(daemon_.pid > 0 ? &daemon_ : NULL, pg, false);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flood_of_half_sent_requests),
        cmocka_unit_test(test_descriptor_budget),
        cmocka_unit_test(test_slowloris_is_closed),
        cmocka_unit_test(test_oversized_head),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
