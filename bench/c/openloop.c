/*
 * openloop: the open-loop load generator of `mix ringbus.bench openloop`,
 * and the bare RESP responder its rows are compared with (the floor).
 *
 *   openloop gen --port P --rate R --seconds S [--connections C] [--burst B]
 *                [--drain S] [--spin-us U] [--proto resp|push]
 *                [--channel NAME] [--payload N] [-- ARG ...]
 *   openloop floor [--port P]
 *   openloop hist          (values in ns on stdin, one a line)
 *
 * gen opens C connections to 127.0.0.1:P and sends R requests a second in
 * all, request i on connection i mod C, in bursts of B: request i is due
 * floor(i / B) * B / R seconds after the start, whatever the replies do
 * (wrk2's open loop). Each request is timed from that intended time to its
 * reply, so a stall of the server is counted by every request due during
 * it (no coordinated omission). One thread, epoll, non-blocking sockets;
 * pin it with taskset. A connection's replies come in the order of its
 * requests, so its k-th reply answers its k-th request: no send times are
 * kept, the intended time is computed.
 *
 * --proto resp sends the command given after `--` (default PING) as a RESP
 * array of bulk strings and counts replies by parsing RESP incrementally
 * (simple strings, errors, integers, bulk strings, arrays, nested; error
 * replies are counted as errors). --proto push sends HELLO (version 4),
 * waits for HELLO_OK, then sends acked PUSH frames of --payload bytes to
 * --channel (docs/PROTOCOL.md) and counts PUSH_ACKS entries (a non-zero
 * status is an error) and ERROR frames.
 *
 * Between requests it sleeps in epoll_wait on a timerfd set to the next
 * request's time (timer slack 1 ns). With --spin-us U it wakes U us early
 * and polls until then: on a core of its own that keeps the wake-up's
 * latency out of the sends; on a shared core it takes CPU from the servers.
 *
 * It also measures itself: the send lag of each request (when the
 * generator wrote it, after the write, minus its intended time) and the
 * rate it achieved (requests over the time from the start to the last
 * write, plus one burst's interval). A server that does not read makes the
 * generator queue its bytes, not wait: that is the server's latency, not
 * the generator's lag.
 *
 * It prints one line of key=value: the latencies (p50, p99, p99.9, p99.99,
 * max, in us), the send lag (p99.9 and max), the rates, the counts, and
 * `curve_us`, the latency at the percentiles 1 - 10^-x for x = 0, 0.1, 0.2,
 * ... while 10^x requests were answered (HdrHistogram's percentile
 * spectrum). Latencies go into a log-linear histogram in ns: exact below
 * 1024 ns, 512 linear buckets per power of two above (0.2% at most), to
 * 2^40 ns; a percentile is its bucket's upper edge, at most the exact max.
 * Exit status 0 when the run completed (even if some requests were not
 * answered within --drain seconds after the last send: `unanswered`
 * says), 1 on a usage error, 2 when a connection failed.
 *
 * floor listens on 127.0.0.1:P (0 for a free port), prints `READY port=N`,
 * and answers every RESP command with +PONG (PING) or +OK (anything else),
 * one write per read, storing nothing: the latency no server can go below
 * on this machine's loopback. It exits when its stdin closes.
 *
 * hist records the values on stdin and prints the same percentiles as gen,
 * for the tests.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define NS 1000000000ULL
#define MAX_SECONDS 3600.0
#define MAX_RATE 10000000.0
#define MAX_REQUESTS 2000000000ULL
#define MAX_CONNECTIONS 4096
#define MAX_OUT (64u << 20) /* bytes queued on one connection at most */
#define READ_SIZE 65536

static void die(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "openloop: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(status);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * NS + (uint64_t)ts.tv_nsec;
}

/* ---- Histogram: log-linear, HdrHistogram-like, in ns ---- */

#define H_EXACT 1024 /* values below have a bucket each */
#define H_SUB 512    /* buckets per power of two above */
#define H_TOP 40     /* values up to 2^40 ns (18 minutes) */
#define H_BUCKETS (H_EXACT + (H_TOP - 10) * H_SUB)

struct hist {
    uint64_t counts[H_BUCKETS];
    uint64_t n, max;
};

static int h_index(uint64_t v)
{
    if (v < H_EXACT)
        return (int)v;
    if (v >= (1ULL << H_TOP))
        v = (1ULL << H_TOP) - 1;
    int k = 63 - __builtin_clzll(v); /* 10 .. H_TOP - 1 */
    int sub = (int)(v >> (k - 9)) - H_SUB;
    return H_EXACT + (k - 10) * H_SUB + sub;
}

static uint64_t h_upper(int i)
{
    if (i < H_EXACT)
        return (uint64_t)i;
    int k = (i - H_EXACT) / H_SUB + 10;
    uint64_t sub = (uint64_t)((i - H_EXACT) % H_SUB);
    return ((H_SUB + sub + 1) << (k - 9)) - 1;
}

static void h_record(struct hist *h, int64_t value)
{
    uint64_t v = value < 0 ? 0 : (uint64_t)value;
    h->counts[h_index(v)]++;
    h->n++;
    if (v > h->max)
        h->max = v;
}

/* The nearest-rank percentile p (0 <= p <= 1): its bucket's upper edge, at most the max. */
static uint64_t h_percentile(const struct hist *h, double p)
{
    if (h->n == 0)
        return 0;
    /* The epsilon keeps 0.999 * 1000 (999.0000000000001 in floating point) at rank 999. */
    uint64_t rank = (uint64_t)ceil(p * (double)h->n - 1e-9);
    if (rank < 1)
        rank = 1;
    if (rank > h->n)
        rank = h->n;
    uint64_t seen = 0;
    for (int i = 0; i < H_BUCKETS; i++) {
        seen += h->counts[i];
        if (seen >= rank) {
            if (i == H_BUCKETS - 1)
                return h->max; /* the last bucket holds every value past it too */
            uint64_t u = h_upper(i);
            return u < h->max ? u : h->max;
        }
    }
    return h->max;
}

static double us(uint64_t ns) { return (double)ns / 1000.0; }

static void print_latencies(const struct hist *h)
{
    printf("p50_us=%.1f p99_us=%.1f p999_us=%.1f p9999_us=%.1f max_us=%.1f", us(h_percentile(h, 0.5)),
           us(h_percentile(h, 0.99)), us(h_percentile(h, 0.999)), us(h_percentile(h, 0.9999)),
           us(h->max));
}

/* The percentile spectrum: 1 - 10^-x for x = 0, 0.1, ... while 10^x <= n. */
static void print_curve(const struct hist *h)
{
    printf(" curve_us=");
    for (int i = 0; h->n > 0 && i <= 90 && pow(10.0, i / 10.0) <= (double)h->n * (1 + 1e-9); i++) {
        double p = i == 0 ? 0.0 : 1.0 - pow(10.0, -i / 10.0);
        printf("%s%.1f", i == 0 ? "" : ",", us(h_percentile(h, p)));
    }
}

/* ---- RESP replies, parsed incrementally ---- */

#define RESP_DEPTH 32

enum { R_TYPE, R_LINE, R_LF, R_BULK, R_BULK_CR, R_BULK_LF };

struct resp {
    int state, type, top_error, neg, digits;
    int64_t num, bulk_left;
    int depth;
    int64_t left[RESP_DEPTH]; /* elements still to come in each open array */
};

/* A value ended: the replies it completes. Returns 1 when a top-level reply ended. */
static int resp_value_done(struct resp *r)
{
    r->state = R_TYPE;
    while (r->depth > 0) {
        if (--r->left[r->depth - 1] > 0)
            return 0;
        r->depth--;
    }
    return 1;
}

/*
 * Feeds `len` bytes; adds the whole replies they end to *replies and the
 * error replies among them to *errors. Returns 0, or -1 at a byte no reply
 * can have there.
 */
static int resp_feed(struct resp *r, const char *p, size_t len, uint64_t *replies, uint64_t *errors)
{
    for (size_t i = 0; i < len; i++) {
        char c = p[i];
        switch (r->state) {
        case R_TYPE:
            if (c != '+' && c != '-' && c != ':' && c != '$' && c != '*')
                return -1;
            r->type = c;
            if (r->depth == 0)
                r->top_error = c == '-';
            r->num = 0;
            r->neg = 0;
            r->digits = 0;
            r->state = R_LINE;
            break;
        case R_LINE:
            if (c == '\r') {
                if ((r->type == '$' || r->type == '*') && r->digits == 0)
                    return -1;
                r->state = R_LF;
            } else if (r->type == '$' || r->type == '*' || r->type == ':') {
                if (c == '-' && r->digits == 0 && !r->neg)
                    r->neg = 1;
                else if (c >= '0' && c <= '9' && r->digits < 18) {
                    r->num = r->num * 10 + (c - '0');
                    r->digits++;
                } else
                    return -1;
            } else if (c == '\n')
                return -1;
            break;
        case R_LF: {
            if (c != '\n')
                return -1;
            int64_t n = r->neg ? -r->num : r->num;
            int done = 0;
            if (r->type == '$') {
                if (n == -1)
                    done = 1;
                else if (n < 0)
                    return -1;
                else {
                    r->bulk_left = n;
                    r->state = n > 0 ? R_BULK : R_BULK_CR;
                }
            } else if (r->type == '*') {
                if (n == -1 || n == 0)
                    done = 1;
                else if (n < 0 || r->depth == RESP_DEPTH)
                    return -1;
                else {
                    r->left[r->depth++] = n;
                    r->state = R_TYPE;
                }
            } else
                done = 1;
            if (done && resp_value_done(r)) {
                (*replies)++;
                if (r->top_error)
                    (*errors)++;
            }
            break;
        }
        case R_BULK: {
            size_t take = len - i;
            if ((int64_t)take > r->bulk_left)
                take = (size_t)r->bulk_left;
            r->bulk_left -= (int64_t)take;
            i += take - 1;
            if (r->bulk_left == 0)
                r->state = R_BULK_CR;
            break;
        }
        case R_BULK_CR:
            if (c != '\r')
                return -1;
            r->state = R_BULK_LF;
            break;
        case R_BULK_LF:
            if (c != '\n')
                return -1;
            if (resp_value_done(r)) {
                (*replies)++;
                if (r->top_error)
                    (*errors)++;
            }
            break;
        }
    }
    return 0;
}

/* ---- Binary protocol (docs/PROTOCOL.md, version 4; PUSH and PUSH_ACKS are as in 3) ---- */

#define OP_HELLO 0x01
#define OP_PUSH 0x04
#define OP_HELLO_OK 0x81
#define OP_PUSH_ACKS 0x83
#define OP_ERROR 0xff
#define PROTOCOL_VERSION 4
#define ACK_ENTRY 14
#define MAX_ERROR_FRAME 65544

static void put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static void put16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)(v >> 8);
    p[1] = (unsigned char)v;
}

static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint16_t get16(const unsigned char *p) { return (uint16_t)(p[0] << 8 | p[1]); }

enum { B_HEAD, B_COUNT, B_ENTRY, B_ERROR };

struct frames {
    int state;
    unsigned char buf[MAX_ERROR_FRAME];
    uint32_t have, length, left; /* bytes held of the current part; frame length; entries left */
    uint32_t max_frame;
};

struct bin_counts {
    uint64_t acks, errors;
    uint32_t expected_corr; /* the corr the next entry must carry */
    int fatal;
    char message[200];
};

/* Takes up to `want` bytes into f->buf; returns how many it took from p. */
static size_t take(struct frames *f, const unsigned char *p, size_t len, uint32_t want)
{
    size_t n = want - f->have;
    if (n > len)
        n = len;
    memcpy(f->buf + f->have, p, n);
    f->have += (uint32_t)n;
    return n;
}

static uint32_t next_corr(uint32_t corr) { return corr == 0xffffffffu ? 1 : corr + 1; }

/*
 * Feeds `len` bytes of server frames: PUSH_ACKS entries, each one answer
 * (status not 0: an error), and ERROR frames (corr not 0: the answer to the
 * oldest push, an error; corr 0: the connection failed). Returns 0 or -1.
 */
static int frames_feed(struct frames *f, struct bin_counts *k, const unsigned char *p, size_t len)
{
    size_t i = 0;
    while (i < len) {
        switch (f->state) {
        case B_HEAD:
            i += take(f, p + i, len - i, 5);
            if (f->have < 5)
                break;
            f->length = get32(f->buf);
            f->have = 0;
            if (f->buf[4] == OP_PUSH_ACKS) {
                if (f->length < 5 || f->length > f->max_frame || (f->length - 5) % ACK_ENTRY != 0) {
                    snprintf(k->message, sizeof k->message, "bad PUSH_ACKS length %" PRIu32, f->length);
                    return -1;
                }
                f->state = B_COUNT;
            } else if (f->buf[4] == OP_ERROR) {
                if (f->length < 9 || f->length > MAX_ERROR_FRAME) {
                    snprintf(k->message, sizeof k->message, "bad ERROR length %" PRIu32, f->length);
                    return -1;
                }
                f->state = B_ERROR;
            } else {
                snprintf(k->message, sizeof k->message, "unexpected frame, opcode 0x%02x", f->buf[4]);
                return -1;
            }
            break;
        case B_COUNT:
            i += take(f, p + i, len - i, 4);
            if (f->have < 4)
                break;
            f->left = get32(f->buf);
            f->have = 0;
            if ((uint64_t)f->left * ACK_ENTRY + 5 != f->length) {
                snprintf(k->message, sizeof k->message, "PUSH_ACKS count %" PRIu32 " in %" PRIu32 " bytes",
                         f->left, f->length);
                return -1;
            }
            f->state = f->left > 0 ? B_ENTRY : B_HEAD;
            break;
        case B_ENTRY:
            i += take(f, p + i, len - i, ACK_ENTRY);
            if (f->have < ACK_ENTRY)
                break;
            f->have = 0;
            if (get32(f->buf) != k->expected_corr) {
                snprintf(k->message, sizeof k->message, "ack for corr %" PRIu32 ", expected %" PRIu32,
                         get32(f->buf), k->expected_corr);
                return -1;
            }
            k->expected_corr = next_corr(k->expected_corr);
            k->acks++;
            if (get16(f->buf + 4) != 0)
                k->errors++;
            if (--f->left == 0)
                f->state = B_HEAD;
            break;
        case B_ERROR:
            i += take(f, p + i, len - i, f->length - 1);
            if (f->have < f->length - 1)
                break;
            f->have = 0;
            f->state = B_HEAD;
            {
                uint32_t corr = get32(f->buf);
                uint16_t code = get16(f->buf + 4);
                uint16_t mlen = get16(f->buf + 6);
                if (8u + mlen > f->length - 1)
                    mlen = (uint16_t)(f->length - 9);
                k->errors++;
                if (corr == 0) {
                    snprintf(k->message, sizeof k->message, "ERROR %u: %.*s", code, (int)mlen, f->buf + 8);
                    k->fatal = 1;
                    return -1;
                }
                k->expected_corr = next_corr(k->expected_corr);
                k->acks++;
            }
            break;
        }
    }
    return 0;
}

/* ---- Sockets ---- */

static void set_nonblocking(int fd)
{
    int flags = fcntl(fd, F_GETFL, 0);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
        die(2, "fcntl: %s", strerror(errno));
}

static int connect_to(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        die(2, "socket: %s", strerror(errno));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0)
        die(2, "connect to 127.0.0.1:%d: %s", port, strerror(errno));
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

static void write_all(int fd, const unsigned char *p, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            die(2, "send: %s", strerror(errno));
        p += n;
        len -= (size_t)n;
    }
}

static void read_exactly(int fd, unsigned char *p, size_t len)
{
    while (len > 0) {
        ssize_t n = recv(fd, p, len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n == 0)
            die(2, "the server closed the connection during HELLO");
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            die(2, "no answer to HELLO within 5 s: is this a Ringbus binary port?");
        if (n < 0)
            die(2, "recv during HELLO: %s", strerror(errno));
        p += n;
        len -= (size_t)n;
    }
}

/* HELLO (no token), then HELLO_OK; returns the server's max_frame_size. */
static uint32_t hello(int fd)
{
    unsigned char f[19];
    put32(f, 15);
    f[4] = OP_HELLO;
    put32(f + 5, 1);
    memcpy(f + 9, "RBUS", 4);
    put16(f + 13, PROTOCOL_VERSION);
    put16(f + 15, 0);
    put16(f + 17, 0);
    write_all(fd, f, sizeof f);

    unsigned char head[5];
    read_exactly(fd, head, 5);
    uint32_t length = get32(head);
    if (length < 1 || length > MAX_ERROR_FRAME)
        die(2, "bad frame length %" PRIu32 " during HELLO", length);
    unsigned char body[MAX_ERROR_FRAME];
    read_exactly(fd, body, length - 1);
    if (head[4] == OP_ERROR && length >= 9) {
        uint16_t mlen = get16(body + 6);
        if (8u + mlen > length - 1)
            mlen = (uint16_t)(length - 9);
        die(2, "HELLO refused: ERROR %u: %.*s", get16(body + 4), (int)mlen, body + 8);
    }
    if (head[4] != OP_HELLO_OK || length != 27)
        die(2, "expected HELLO_OK, got opcode 0x%02x of length %" PRIu32, head[4], length);
    return get32(body + 6);
}

/* ---- The generator ---- */

struct conn {
    int fd;
    unsigned char *out; /* bytes due and not yet written */
    size_t out_len, out_off, out_cap;
    int want_out;
    uint64_t sent, answered; /* requests of this connection issued, answered */
    uint64_t lag_from;       /* its first request whose send lag is not recorded yet */
    struct resp resp;
    struct frames *frames;
    struct bin_counts bin;
};

struct gen {
    int port, connections, burst, push, epfd, tfd;
    double rate, seconds, drain;
    uint64_t total, spin_ns, start;
    unsigned char *request; /* a RESP command, or a PUSH frame whose corr is set per request */
    size_t request_len;
    struct conn *conns;
    struct hist latency, lag;
    uint64_t issued, answered, errors, last_send;
};

/* When request i is due, ns after the start. */
static uint64_t intended(const struct gen *g, uint64_t i)
{
    uint64_t first = i / (uint64_t)g->burst * (uint64_t)g->burst;
    return (uint64_t)((long double)first * NS / g->rate);
}

static void out_append(struct conn *c, const unsigned char *p, size_t len)
{
    if (c->out_off > 0 && c->out_off == c->out_len)
        c->out_off = c->out_len = 0;
    if (c->out_len + len > c->out_cap) {
        if (c->out_off > 0) {
            memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
            c->out_len -= c->out_off;
            c->out_off = 0;
        }
        if (c->out_len + len > c->out_cap) {
            size_t cap = c->out_cap ? c->out_cap : 4096;
            while (cap < c->out_len + len)
                cap *= 2;
            if (cap > MAX_OUT)
                die(2, "more than %u bytes queued on one connection: the server is not reading", MAX_OUT);
            c->out = realloc(c->out, cap);
            if (!c->out)
                die(2, "out of memory");
            c->out_cap = cap;
        }
    }
    memcpy(c->out + c->out_len, p, len);
    c->out_len += len;
}

static void want_out(struct gen *g, struct conn *c, int want)
{
    if (c->want_out == want)
        return;
    struct epoll_event ev = {.events = EPOLLIN | (want ? EPOLLOUT : 0), .data.ptr = c};
    if (epoll_ctl(g->epfd, EPOLL_CTL_MOD, c->fd, &ev) < 0)
        die(2, "epoll_ctl: %s", strerror(errno));
    c->want_out = want;
}

/* Writes what the kernel takes now; the rest waits for EPOLLOUT. */
static void flush(struct gen *g, struct conn *c)
{
    while (c->out_off < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (n > 0) {
            c->out_off += (size_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            want_out(g, c, 1);
            return;
        } else {
            die(2, "send: %s", n == 0 ? "no progress" : strerror(errno));
        }
    }
    want_out(g, c, 0);
}

/* Queues and writes every request due by `now`, a write per connection; records their send lags. */
static void issue_due(struct gen *g, uint64_t now)
{
    uint64_t first = g->issued;
    while (g->issued < g->total && g->start + intended(g, g->issued) <= now) {
        struct conn *c = &g->conns[g->issued % (uint64_t)g->connections];
        if (g->push)
            put32(g->request + 5, (uint32_t)(c->sent % 0xffffffffu) + 1);
        out_append(c, g->request, g->request_len);
        c->sent++;
        g->issued++;
    }
    if (g->issued == first)
        return;
    int n = g->connections;
    uint64_t touched = g->issued - first < (uint64_t)n ? g->issued - first : (uint64_t)n;
    for (uint64_t j = 0; j < touched; j++) {
        struct conn *c = &g->conns[(first + j) % (uint64_t)n];
        flush(g, c);
        uint64_t t = now_ns() - g->start;
        for (uint64_t k = c->lag_from; k < c->sent; k++)
            h_record(&g->lag, (int64_t)(t - intended(g, (first + j) % (uint64_t)n + k * (uint64_t)n)));
        c->lag_from = c->sent;
        g->last_send = t;
    }
}

/* Reads all a connection has; times each whole reply from its request's intended time. */
static void read_replies(struct gen *g, struct conn *c, int index)
{
    static unsigned char buf[READ_SIZE];
    for (;;) {
        ssize_t n = recv(c->fd, buf, sizeof buf, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n == 0)
            die(2, "connection %d: the server closed it after %" PRIu64 " replies", index, c->answered);
        if (n < 0)
            die(2, "connection %d: recv: %s", index, strerror(errno));
        uint64_t t = now_ns() - g->start;
        uint64_t replies = 0, errors = 0;
        if (g->push) {
            uint64_t acks = c->bin.acks, errs = c->bin.errors;
            if (frames_feed(c->frames, &c->bin, buf, (size_t)n) < 0)
                die(2, "connection %d: %s", index, c->bin.message);
            replies = c->bin.acks - acks;
            errors = c->bin.errors - errs;
        } else if (resp_feed(&c->resp, (const char *)buf, (size_t)n, &replies, &errors) < 0) {
            die(2, "connection %d: not a RESP reply after %" PRIu64 " replies", index, c->answered);
        }
        if (c->answered + replies > c->sent)
            die(2, "connection %d: more replies than requests", index);
        for (uint64_t k = c->answered; k < c->answered + replies; k++)
            h_record(&g->latency, (int64_t)(t - intended(g, (uint64_t)index + k * (uint64_t)g->connections)));
        c->answered += replies;
        g->answered += replies;
        g->errors += errors;
        if ((size_t)n < sizeof buf)
            return;
    }
}

static void arm_timer(struct gen *g, uint64_t at)
{
    struct itimerspec its = {0};
    its.it_value.tv_sec = (time_t)(at / NS);
    its.it_value.tv_nsec = (long)(at % NS);
    if (timerfd_settime(g->tfd, TFD_TIMER_ABSTIME, &its, NULL) < 0)
        die(2, "timerfd_settime: %s", strerror(errno));
}

static void build_resp(struct gen *g, int argc, char **argv)
{
    size_t len = 32;
    for (int i = 0; i < argc; i++)
        len += strlen(argv[i]) + 32;
    g->request = malloc(len);
    size_t at = (size_t)sprintf((char *)g->request, "*%d\r\n", argc);
    for (int i = 0; i < argc; i++)
        at += (size_t)sprintf((char *)g->request + at, "$%zu\r\n%s\r\n", strlen(argv[i]), argv[i]);
    g->request_len = at;
}

static void build_push(struct gen *g, const char *channel, size_t payload)
{
    size_t name = strlen(channel);
    if (name < 1 || name > 255)
        die(1, "--channel must be 1 to 255 bytes");
    g->request_len = 4 + 1 + 4 + 1 + 2 + name + 4 + payload;
    g->request = malloc(g->request_len);
    unsigned char *p = g->request;
    put32(p, (uint32_t)(g->request_len - 4));
    p[4] = OP_PUSH;
    put32(p + 5, 1);
    p[9] = 0; /* flags: acked, untagged */
    put16(p + 10, (uint16_t)name);
    memcpy(p + 12, channel, name);
    put32(p + 12 + name, (uint32_t)payload);
    memset(p + 16 + name, 'v', payload);
}

static double number(const char *flag, const char *value, double lo, double hi)
{
    char *end;
    double v = value ? strtod(value, &end) : NAN;
    if (!value || *end || !(v >= lo && v <= hi))
        die(1, "%s: expected a number from %g to %g, got %s", flag, lo, hi, value ? value : "nothing");
    return v;
}

static int gen_main(int argc, char **argv)
{
    struct gen *g = calloc(1, sizeof *g);
    if (!g)
        die(2, "out of memory");
    g->connections = 1;
    g->burst = 1;
    g->drain = 10;
    g->spin_ns = 0;
    g->port = -1;
    const char *proto = "resp", *channel = "openloop";
    size_t payload = 16;
    static char *ping[] = {"PING"};
    char **command = ping;
    int command_argc = 1;

    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--")) {
            command = argv + i + 1;
            command_argc = argc - i - 1;
            break;
        } else if (!strcmp(a, "--port"))
            g->port = (int)number(a, v, 1, 65535);
        else if (!strcmp(a, "--rate"))
            g->rate = number(a, v, 1, MAX_RATE);
        else if (!strcmp(a, "--seconds"))
            g->seconds = number(a, v, 0.001, MAX_SECONDS);
        else if (!strcmp(a, "--connections"))
            g->connections = (int)number(a, v, 1, MAX_CONNECTIONS);
        else if (!strcmp(a, "--burst"))
            g->burst = (int)number(a, v, 1, 1000000);
        else if (!strcmp(a, "--drain"))
            g->drain = number(a, v, 0, 600);
        else if (!strcmp(a, "--spin-us"))
            g->spin_ns = (uint64_t)(number(a, v, 0, 1000000) * 1000);
        else if (!strcmp(a, "--proto"))
            proto = v;
        else if (!strcmp(a, "--channel"))
            channel = v;
        else if (!strcmp(a, "--payload"))
            payload = (size_t)number(a, v, 0, 1 << 20);
        else
            die(1, "unknown option %s", a);
        i++;
    }
    if (g->port < 0 || g->rate <= 0 || g->seconds <= 0)
        die(1, "gen needs --port, --rate and --seconds");
    if (!proto || (strcmp(proto, "resp") && strcmp(proto, "push")))
        die(1, "--proto: expected resp or push");
    if (!channel)
        die(1, "--channel: expected a name");
    if (command_argc < 1)
        die(1, "expected a command after --");
    g->push = !strcmp(proto, "push");
    double total = round(g->rate * g->seconds);
    if (total < 1)
        total = 1;
    if (total > (double)MAX_REQUESTS)
        die(1, "--rate x --seconds is over %llu requests", (unsigned long long)MAX_REQUESTS);
    g->total = (uint64_t)total;
    if (g->push)
        build_push(g, channel, payload);
    else
        build_resp(g, command_argc, command);

    signal(SIGPIPE, SIG_IGN);
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0); /* timers wake on time, not up to 50 us late */
    g->epfd = epoll_create1(0);
    g->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
    if (g->epfd < 0 || g->tfd < 0)
        die(2, "epoll/timerfd: %s", strerror(errno));
    struct epoll_event tev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(g->epfd, EPOLL_CTL_ADD, g->tfd, &tev);

    int n = g->connections;
    g->conns = calloc((size_t)n, sizeof *g->conns);
    for (int i = 0; i < n; i++) {
        struct conn *c = &g->conns[i];
        c->fd = connect_to(g->port);
        if (g->push) {
            c->frames = calloc(1, sizeof *c->frames);
            c->frames->max_frame = hello(c->fd);
            c->bin.expected_corr = 1;
        }
        set_nonblocking(c->fd);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(g->epfd, EPOLL_CTL_ADD, c->fd, &ev) < 0)
            die(2, "epoll_ctl: %s", strerror(errno));
    }

    struct epoll_event events[256];
    uint64_t armed = 0;
    g->start = now_ns() + 10000000; /* the first request is due 10 ms after the connections */
    for (;;) {
        uint64_t now = now_ns();
        if (g->issued < g->total)
            issue_due(g, now);
        if (g->issued == g->total) {
            if (g->answered == g->total)
                break;
            if (now > g->start + g->last_send + (uint64_t)(g->drain * NS))
                break;
        }
        int timeout = 0;
        if (g->issued < g->total) {
            uint64_t next = g->start + intended(g, g->issued);
            now = now_ns();
            if (next > now + g->spin_ns) {
                if (armed != next - g->spin_ns)
                    arm_timer(g, armed = next - g->spin_ns);
                timeout = -1;
            }
        } else {
            timeout = 100;
        }
        int ready = epoll_wait(g->epfd, events, 256, timeout);
        if (ready < 0 && errno != EINTR)
            die(2, "epoll_wait: %s", strerror(errno));
        for (int e = 0; e < ready; e++) {
            struct conn *c = events[e].data.ptr;
            if (!c) {
                uint64_t expirations;
                if (read(g->tfd, &expirations, sizeof expirations) < 0 && errno != EAGAIN)
                    die(2, "timerfd read: %s", strerror(errno));
                armed = 0;
                continue;
            }
            if (events[e].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
                read_replies(g, c, (int)(c - g->conns));
            if (events[e].events & EPOLLOUT)
                flush(g, c);
        }
    }

    uint64_t elapsed = now_ns() - g->start;
    double span = (double)g->last_send / NS + (double)g->burst / g->rate;
    printf("requests=%" PRIu64 " sent=%" PRIu64 " answered=%" PRIu64 " errors=%" PRIu64
           " unanswered=%" PRIu64 " target_rate=%.0f achieved_rate=%.0f elapsed_s=%.3f ",
           g->total, g->issued, g->answered, g->errors, g->issued - g->answered, g->rate,
           (double)g->issued / span, (double)elapsed / NS);
    print_latencies(&g->latency);
    printf(" lag_p999_us=%.1f lag_max_us=%.1f", us(h_percentile(&g->lag, 0.999)), us(g->lag.max));
    print_curve(&g->latency);
    printf("\n");
    fflush(stdout);
    return 0;
}

/* ---- The floor: a bare RESP responder ---- */

enum { F_STAR, F_COUNT, F_DOLLAR, F_LEN, F_BODY, F_CR, F_LF };

struct client {
    int fd, state, first;
    int64_t num, args_left, body_left;
    char head[4];
    int head_len;
    char out[READ_SIZE * 2];
    size_t out_len;
};

/* Parses commands (arrays of bulk strings); appends +PONG or +OK for each. Returns 0 or -1. */
static int floor_feed(struct client *cl, const char *p, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        char c = p[i];
        switch (cl->state) {
        case F_STAR:
            if (c != '*')
                return -1;
            cl->num = 0;
            cl->state = F_COUNT;
            break;
        case F_COUNT:
        case F_LEN:
            if (c >= '0' && c <= '9' && cl->num < 100000000)
                cl->num = cl->num * 10 + (c - '0');
            else if (c == '\r')
                ;
            else if (c == '\n') {
                if (cl->state == F_COUNT) {
                    if (cl->num < 1)
                        return -1;
                    cl->args_left = cl->num;
                    cl->first = 1;
                    cl->head_len = 0;
                    cl->state = F_DOLLAR;
                } else {
                    cl->body_left = cl->num;
                    cl->state = cl->num > 0 ? F_BODY : F_CR;
                }
            } else
                return -1;
            break;
        case F_DOLLAR:
            if (c != '$')
                return -1;
            cl->num = 0;
            cl->state = F_LEN;
            break;
        case F_BODY: {
            size_t n = len - i;
            if ((int64_t)n > cl->body_left)
                n = (size_t)cl->body_left;
            if (cl->first)
                for (size_t j = 0; j < n && cl->head_len < 4; j++)
                    cl->head[cl->head_len++] = p[i + j];
            cl->body_left -= (int64_t)n;
            i += n - 1;
            if (cl->body_left == 0)
                cl->state = F_CR;
            break;
        }
        case F_CR:
            if (c != '\r')
                return -1;
            cl->state = F_LF;
            break;
        case F_LF:
            if (c != '\n')
                return -1;
            if (cl->first && cl->num != 4)
                cl->head_len = 0; /* the command name is not four bytes: not PING */
            cl->first = 0;
            if (--cl->args_left > 0) {
                cl->state = F_DOLLAR;
                break;
            }
            cl->state = F_STAR;
            {
                int is_ping = cl->head_len == 4 && !strncasecmp(cl->head, "PING", 4);
                const char *reply = is_ping ? "+PONG\r\n" : "+OK\r\n";
                size_t rlen = strlen(reply);
                if (cl->out_len + rlen > sizeof cl->out)
                    return -2;
                memcpy(cl->out + cl->out_len, reply, rlen);
                cl->out_len += rlen;
            }
            break;
        }
    }
    return 0;
}

static void floor_close(int epfd, struct client *cl)
{
    epoll_ctl(epfd, EPOLL_CTL_DEL, cl->fd, NULL);
    close(cl->fd);
    free(cl);
}

static int floor_main(int argc, char **argv)
{
    int port = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--port") && i + 1 < argc)
            port = (int)number("--port", argv[++i], 0, 65535);
        else
            die(1, "unknown option %s", argv[i]);
    }
    signal(SIGPIPE, SIG_IGN);
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(lfd, (struct sockaddr *)&a, sizeof a) < 0 || listen(lfd, 1024) < 0)
        die(2, "listen on 127.0.0.1:%d: %s", port, strerror(errno));
    socklen_t alen = sizeof a;
    getsockname(lfd, (struct sockaddr *)&a, &alen);
    set_nonblocking(lfd);
    printf("READY port=%d\n", ntohs(a.sin_port));
    fflush(stdout);

    int epfd = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &lfd};
    epoll_ctl(epfd, EPOLL_CTL_ADD, lfd, &ev);
    int in = 0;
    struct epoll_event iev = {.events = EPOLLIN, .data.ptr = &in};
    epoll_ctl(epfd, EPOLL_CTL_ADD, 0, &iev); /* stdin: its end is ours */

    static char buf[READ_SIZE];
    struct epoll_event events[256];
    for (;;) {
        int ready = epoll_wait(epfd, events, 256, -1);
        if (ready < 0 && errno != EINTR)
            die(2, "epoll_wait: %s", strerror(errno));
        for (int e = 0; e < ready; e++) {
            void *who = events[e].data.ptr;
            if (who == &in) {
                if (read(0, buf, sizeof buf) <= 0)
                    return 0;
            } else if (who == &lfd) {
                int fd;
                while ((fd = accept(lfd, NULL, NULL)) >= 0) {
                    set_nonblocking(fd);
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    struct client *cl = calloc(1, sizeof *cl);
                    cl->fd = fd;
                    struct epoll_event cev = {.events = EPOLLIN, .data.ptr = cl};
                    epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &cev);
                }
            } else {
                struct client *cl = who;
                ssize_t n = recv(cl->fd, buf, sizeof buf, 0);
                if (n < 0 && (errno == EAGAIN || errno == EINTR))
                    continue;
                if (n <= 0 || floor_feed(cl, buf, (size_t)n) < 0) {
                    floor_close(epfd, cl);
                    continue;
                }
                /* One write per read; the replies of a read are at most 7 bytes per 14 read. */
                size_t off = 0;
                while (off < cl->out_len) {
                    ssize_t w = send(cl->fd, cl->out + off, cl->out_len - off, MSG_NOSIGNAL);
                    if (w > 0)
                        off += (size_t)w;
                    else if (w < 0 && (errno == EAGAIN || errno == EINTR))
                        continue; /* rare on loopback; the floor keeps it simple and spins */
                    else
                        break;
                }
                cl->out_len = 0;
            }
        }
    }
}

/* ---- hist: the histogram on values from stdin ---- */

static int hist_main(void)
{
    struct hist *h = calloc(1, sizeof *h);
    long long v;
    while (scanf("%lld", &v) == 1)
        h_record(h, v);
    printf("count=%" PRIu64 " ", h->n);
    print_latencies(h);
    print_curve(h);
    printf("\n");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "gen"))
        return gen_main(argc - 2, argv + 2);
    if (argc >= 2 && !strcmp(argv[1], "floor"))
        return floor_main(argc - 2, argv + 2);
    if (argc == 2 && !strcmp(argv[1], "hist"))
        return hist_main();
    fprintf(stderr, "usage: openloop gen --port P --rate R --seconds S [--connections C] [--burst B]\n"
                    "                    [--drain S] [--spin-us U] [--proto resp|push] [--channel NAME]\n"
                    "                    [--payload N] [-- ARG ...]\n"
                    "       openloop floor [--port P]\n"
                    "       openloop hist\n");
    return 1;
}
