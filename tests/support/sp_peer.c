/*
 * sp_peer.c - raw SP peers for the hostile-peer suites: REQ connections over tcp:// and ipc://
 * made with plain sockets (the SP handshake and framing written by hand), which pipeline
 * token-less Admin.WhoAmI requests and never read, or reset their connection, as an attacker
 * would and as nng's own clients never do.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "buzz/backfill/v1/rpc.pb-c.h"
#include "sp_peer.h"

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A REQ envelope for Admin.WhoAmI without a token, as raw SP wants it. */
static uint8_t envelope[64];
static size_t envelope_len;

static void sp_envelope_init(void)
{
    Buzz__Backfill__V1__RequestEnvelope env = BUZZ__BACKFILL__V1__REQUEST_ENVELOPE__INIT;
    env.method = "buzz.backfill.v1.Admin.WhoAmI";
    env.has_body = true;
    env.body.len = 0;
    assert_true(buzz__backfill__v1__request_envelope__get_packed_size(&env) <= sizeof envelope);
    envelope_len = buzz__backfill__v1__request_envelope__pack(&env, envelope);
}

/* The SP handshake of a REQ peer: 00 'S' 'P' 00, protocol 0x0030 (REQ), 2 zero bytes. */
static void sp_hello(int fd)
{
    static const uint8_t hello[8] = {0, 'S', 'P', 0, 0, 0x30, 0, 0};
    assert_int_equal(write(fd, hello, sizeof hello), (ssize_t)sizeof hello);
}

/* A tiny receive buffer, so the daemon's replies back up at once. */
static void sp_small_rcvbuf(int fd)
{
    int small = 4096;
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small), 0);
}

int sp_url_port(const char *tcp_url)
{
    const char *colon = strrchr(tcp_url, ':');
    assert_non_null(colon);
    return atoi(colon + 1);
}

/* A tcp connection from source address src ("127.0.0.2"; NULL: any), with the handshake. */
sp_peer sp_tcp(int port, const char *src, bool hello)
{
    if (envelope_len == 0)
        sp_envelope_init();
    sp_peer p = {.fd = socket(AF_INET, SOCK_STREAM, 0), .ipc = false, .port = port};
    assert_true(p.fd >= 0);
    sp_small_rcvbuf(p.fd);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    if (src != NULL) {
        assert_int_equal(inet_pton(AF_INET, src, &a.sin_addr), 1);
        assert_int_equal(bind(p.fd, (struct sockaddr *)&a, sizeof a), 0);
    }
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(p.fd, (struct sockaddr *)&a, sizeof a), 0);
    if (hello)
        sp_hello(p.fd);
    return p;
}

sp_peer sp_ipc(const char *ipc_url)
{
    if (envelope_len == 0)
        sp_envelope_init();
    sp_peer p = {.fd = socket(AF_UNIX, SOCK_STREAM, 0), .ipc = true};
    assert_true(p.fd >= 0);
    sp_small_rcvbuf(p.fd);
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    const char *path = ipc_url + strlen("ipc://");
    assert_true(strlen(path) < sizeof a.sun_path);
    memcpy(a.sun_path, path, strlen(path) + 1);
    assert_int_equal(connect(p.fd, (struct sockaddr *)&a, sizeof a), 0);
    sp_hello(p.fd);
    return p;
}

/* One request frame: [0x01 on ipc] 64-bit big-endian length, the 32-bit request id with the
 * high bit set, the envelope. */
static size_t sp_frame(const sp_peer *p, uint32_t id, uint8_t *out)
{
    size_t n = 0;
    if (p->ipc)
        out[n++] = 1;
    uint64_t len = envelope_len + 4;
    for (int i = 0; i < 8; i++)
        out[n++] = (uint8_t)(len >> (56 - 8 * i));
    uint32_t rid = id | 0x80000000u;
    for (int i = 0; i < 4; i++)
        out[n++] = (uint8_t)(rid >> (24 - 8 * i));
    memcpy(out + n, envelope, envelope_len);
    return n + envelope_len;
}

/* Write as much of the next frames as the socket takes without blocking, up to `until` frames
 * (negative: no limit). false once the daemon closed the connection. */
bool sp_pump(sp_peer *p, int until)
{
    uint8_t frame[128];
    while (until < 0 || p->sent < until) {
        size_t len = sp_frame(p, (uint32_t)p->sent + 1, frame);
        ssize_t w = send(p->fd, frame + p->off, len - p->off, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return true;
        if (w < 0)
            return false;
        p->off += (size_t)w;
        if (p->off == len) {
            p->off = 0;
            p->sent++;
        }
    }
    return true;
}

const char *sp_pipeline(sp_peer *peers, size_t n, int count, int wait_ms)
{
    int64_t until = now_ms() + wait_ms;
    if (n > SP_PIPELINE_MAX)
        return "too many peers";
    for (;;) {
        bool done = true;
        struct pollfd pfd[SP_PIPELINE_MAX];
        size_t np = 0;
        for (size_t i = 0; i < n; i++) {
            if (!sp_pump(&peers[i], count))
                return "the daemon closed a connection before its requests were sent";
            if (peers[i].sent < count) {
                done = false;
                pfd[np++] = (struct pollfd){.fd = peers[i].fd, .events = POLLOUT};
            }
        }
        if (done)
            return NULL;
        if (now_ms() > until)
            return "the daemon stopped reading pipelined requests";
        (void)poll(pfd, np, 100);
    }
}

bool sp_closed_by_daemon(const sp_peer *p)
{
    struct pollfd pfd = {.fd = p->fd, .events = POLLRDHUP};
    return poll(&pfd, 1, 0) == 1 && (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

bool sp_wait_closed(const sp_peer *p, int wait_ms)
{
    int64_t until = now_ms() + wait_ms;
    while (!sp_closed_by_daemon(p)) {
        if (now_ms() > until)
            return false;
        struct pollfd pfd = {.fd = p->fd, .events = POLLRDHUP};
        (void)poll(&pfd, 1, 50);
    }
    return true;
}

int sp_open_count(const sp_peer *peers, size_t n)
{
    int open = 0;
    for (size_t i = 0; i < n; i++)
        open += !sp_closed_by_daemon(&peers[i]);
    return open;
}

long sp_unread(const sp_peer *p)
{
    int outq = 0;
    if (ioctl(p->fd, SIOCOUTQ, &outq) != 0)
        return -1;
    if (p->ipc || outq > 0)
        return outq;
    struct sockaddr_in me;
    socklen_t len = sizeof me;
    if (getsockname(p->fd, (struct sockaddr *)&me, &len) != 0)
        return -1;
    FILE *f = fopen("/proc/net/tcp", "r");
    if (f == NULL)
        return -1;
    char line[512];
    long unread = -1;
    unsigned daemon_port = (unsigned)p->port, my_port = ntohs(me.sin_port);
    while (unread < 0 && fgets(line, sizeof line, f) != NULL) {
        unsigned lport = 0, rport = 0;
        unsigned long tx = 0, rx = 0;
        if (sscanf(line, " %*d: %*8x:%x %*8x:%x %*x %lx:%lx", &lport, &rport, &tx, &rx) == 4 &&
            lport == daemon_port && rport == my_port)
            unread = (long)rx;
    }
    fclose(f);
    return unread;
}

/* Both ends of a tcp peer's connection as the kernel sees them (queues, timers, backoff,
 * drops), on stderr: whether bytes wait in the daemon's receive queue (it stopped reading) or
 * in the peer's send queue (the peer's kernel holds them: a closed window, a retransmission
 * backing off) is the first question a failure asks. */
static void sp_show_connection(const sp_peer *p)
{
    struct sockaddr_in me;
    socklen_t len = sizeof me;
    if (p->ipc || getsockname(p->fd, (struct sockaddr *)&me, &len) != 0)
        return;
    char cmd[160];
    snprintf(cmd, sizeof cmd, "ss -tnmoi '( sport = :%u or dport = :%u )' 1>&2",
             (unsigned)ntohs(me.sin_port), (unsigned)ntohs(me.sin_port));
    fprintf(stderr, "the connection of the peer on port %u:\n", (unsigned)ntohs(me.sin_port));
    if (system(cmd) != 0)
        fprintf(stderr, "(ss is not available)\n");
}

void sp_wait_read(const sp_peer *p, int wait_ms)
{
    int64_t until = now_ms() + wait_ms;
    long unread;
    /* A closed connection counts as done: the daemon's sweeper may close a quiet unread one
     * while this waits (its threads held by replies that time out left the pipe unread for
     * SRV_TRANSPORT_QUIET_MS), and after the reset the send queue's count never drains.
     * The peer reads (and drops) its replies meanwhile: a tcp peer whose tiny receive buffer
     * is full can stop learning that the daemon's window reopened. Once the kernel dropped one
     * of the daemon's segments for want of memory, every later segment of the daemon (its
     * window updates too) is beyond the peer's closed window and ignored, and the peer's
     * remaining requests wait for the daemon's retransmission timer, backed off to tens of
     * seconds: seen with 50 KB of requests held by the peer's kernel for 24 s while the
     * daemon's receive queue was empty. Reading is what reopens the peer's window; whether the
     * daemon reads everything is then up to the daemon alone. */
    char sink[4096];
    while ((unread = sp_unread(p)) != 0 && !sp_closed_by_daemon(p)) {
        while (recv(p->fd, sink, sizeof sink, MSG_DONTWAIT) > 0)
            ;
        if (now_ms() > until) {
            sp_show_connection(p);
            fail_msg("the daemon left %ld bytes of a peer unread", unread);
        }
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

void sp_reset(sp_peer *p)
{
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    (void)setsockopt(p->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    close(p->fd);
    p->fd = -1;
}
