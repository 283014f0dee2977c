/*
 * http_get.c - the raw-socket HTTP client of http_get.h.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "http_get.h"

static long long th_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static const char *th_header_end(const char *buf, size_t len)
{
    for (size_t i = 0; i + 3 < len; i++)
        if (memcmp(buf + i, "\r\n\r\n", 4) == 0)
            return buf + i + 4;
    return NULL;
}

th_response th_request(const char *method, const char *host, int port, const char *target,
                       int timeout_ms)
{
    th_response r = {.status = -1};
    r.body = calloc(1, 1);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return r;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((unsigned short)port);
    if (inet_pton(AF_INET, host, &a.sin_addr) != 1 ||
        connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return r;
    }
    char req[1024];
    int n = snprintf(req, sizeof req,
                     "%s %s HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\nContent-Length: "
                     "0\r\n\r\n",
                     method, target, host, port);
    if (send(fd, req, (size_t)n, MSG_NOSIGNAL) != n) {
        close(fd);
        return r;
    }
    size_t cap = 65536, len = 0;
    char *buf = malloc(cap + 1);
    long long deadline = th_now_ms() + timeout_ms;
    long content_length = -1;
    const char *body = NULL;
    while (buf != NULL) {
        if (body != NULL && content_length >= 0 &&
            (long)(len - (size_t)(body - buf)) >= content_length)
            break;
        long long left = deadline - th_now_ms();
        struct pollfd p = {fd, POLLIN, 0};
        if (left <= 0 || poll(&p, 1, (int)left) <= 0)
            break;
        if (len == cap) {
            size_t off = body ? (size_t)(body - buf) : 0;
            char *nb = realloc(buf, cap * 2 + 1);
            if (nb == NULL)
                break;
            buf = nb;
            cap *= 2;
            if (body)
                body = buf + off;
        }
        ssize_t got = recv(fd, buf + len, cap - len, 0);
        if (got <= 0)
            break;
        len += (size_t)got;
        if (body == NULL && (body = th_header_end(buf, len)) != NULL) {
            buf[len] = '\0';
            sscanf(buf, "HTTP/1.%*d %d", &r.status);
            for (const char *h = strstr(buf, "\r\n"); h != NULL && h + 2 < body;
                 h = strstr(h + 2, "\r\n")) {
                const char *line = h + 2;
                if (strncasecmp(line, "Content-Length:", 15) == 0)
                    content_length = strtol(line + 15, NULL, 10);
                else if (strncasecmp(line, "Content-Type:", 13) == 0) {
                    const char *v = line + 13;
                    while (*v == ' ')
                        v++;
                    size_t vl = strcspn(v, "\r");
                    if (vl >= sizeof r.type)
                        vl = sizeof r.type - 1;
                    memcpy(r.type, v, vl);
                    r.type[vl] = '\0';
                }
            }
        }
    }
    close(fd);
    if (buf != NULL && body != NULL) {
        size_t blen = len - (size_t)(body - buf);
        free(r.body);
        r.body = malloc(blen + 1);
        if (r.body != NULL) {
            memcpy(r.body, body, blen);
            r.body[blen] = '\0';
            r.body_len = blen;
        }
    } else {
        r.status = -1;
    }
    free(buf);
    return r;
}

th_response th_get(const char *host, int port, const char *target)
{
    return th_request("GET", host, port, target, 10000);
}

void th_response_fini(th_response *r)
{
    free(r->body);
    r->body = NULL;
}

bool th_wait_body(const char *host, int port, const char *target, const char *const *needles,
                  size_t n, int wait_ms)
{
    for (int waited = 0;; waited += 50) {
        th_response r = th_get(host, port, target);
        bool seen = r.status == 200;
        for (size_t i = 0; seen && i < n; i++)
            seen = strstr(r.body, needles[i]) != NULL;
        th_response_fini(&r);
        if (seen)
            return true;
        if (waited >= wait_ms)
            return false;
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
}
