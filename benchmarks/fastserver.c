/* A zero-delay streaming server for client-scaling benchmarks (benchmarks/bench_workers.py
 * --server c): every POST to /v1/completions or /v1/chat/completions gets the same canned
 * response (a vLLM-shaped chunked SSE stream, written by bench_workers.py into RESPONSE_FILE)
 * in as few writes as the socket takes; anything else gets a 404. Keep-alive, one request at a
 * time per connection (pipelined ones are answered in order).
 *
 * Why C: tests/fakeserver.py (Python, one asyncio loop a process) needs ~0.25 us of CPU per
 * streamed token, more than the client it serves; with it as the server, 8 cores of it were the
 * limit at 6-8 client workers on the 16-core GPU host, so the workers' own scaling could not be
 * seen. This one costs the kernel's send and little else. It records nothing: timing truth
 * comes from tests/fakeserver.py.
 *
 *     cc -O2 -pthread -o fastserver benchmarks/fastserver.c
 *     ./fastserver PORT THREADS RESPONSE_FILE     # prints "PORT n" when every thread listens
 *
 * Each thread has its own SO_REUSEPORT listener on 127.0.0.1:PORT and its own epoll; it stops
 * on SIGTERM or SIGINT (the default action). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define IN_MAX (64 * 1024) /* a request head and body; larger ones close the connection */

static const char *canned;
static size_t canned_len;
static const char NOT_FOUND[] = "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n";
static int port;
static pthread_barrier_t listening;

typedef struct {
    int fd;
    size_t have;          /* bytes in in[] */
    const char *out;      /* the response being written (shared, never copied) */
    size_t out_len, out_at;
    char in[IN_MAX];
} Conn;

static void die(const char *what) {
    perror(what);
    exit(1);
}

/* The request at the head of c->in: its total length, 0 while incomplete, -1 if unusable. */
static long request_length(const Conn *c) {
    const char *end = memmem(c->in, c->have, "\r\n\r\n", 4);
    if (end == NULL) return c->have == IN_MAX ? -1 : 0;
    long head = end + 4 - c->in, body = 0;
    for (const char *line = c->in; line < end;) {
        const char *eol = memmem(line, (size_t)(end + 2 - line), "\r\n", 2);  /* found: end */
        if (eol - line > 15 && strncasecmp(line, "content-length:", 15) == 0)
            body = atol(line + 15);  /* stops at the CR */
        line = eol + 2;
    }
    if (body < 0 || head + body > IN_MAX) return -1;
    return (size_t)(head + body) <= c->have ? head + body : 0;
}

static int is_completion(const Conn *c) {
    return strncmp(c->in, "POST /v1/completions ", 21) == 0
        || strncmp(c->in, "POST /v1/chat/completions ", 26) == 0;
}

static void watch(int ep, Conn *c, unsigned events, int op) {
    struct epoll_event ev = {.events = events, .data.ptr = c};
    if (epoll_ctl(ep, op, c->fd, &ev) < 0) die("epoll_ctl");
}

static void drop(Conn *c) {
    close(c->fd);  /* also leaves the epoll set */
    free(c);
}

/* Writes what is pending; 1 when all of it went, 0 when the socket is full, -1 on error. */
static int flush_out(Conn *c) {
    while (c->out_at < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_at, c->out_len - c->out_at, MSG_NOSIGNAL);
        if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
        c->out_at += (size_t)n;
    }
    c->out = NULL;
    return 1;
}

/* Answers every complete request in c->in while the socket takes the answers. */
static int serve(int ep, Conn *c) {
    while (c->out == NULL) {
        long n = request_length(c);
        if (n < 0) return -1;
        if (n == 0) return 0;
        c->out = is_completion(c) ? canned : NOT_FOUND;
        c->out_len = c->out == canned ? canned_len : sizeof(NOT_FOUND) - 1;
        c->out_at = 0;
        memmove(c->in, c->in + n, c->have - (size_t)n);
        c->have -= (size_t)n;
        int done = flush_out(c);
        if (done < 0) return -1;
        if (done == 0) watch(ep, c, EPOLLOUT, EPOLL_CTL_MOD);
    }
    return 0;
}

static void on_readable(int ep, Conn *c) {
    for (;;) {
        ssize_t n = recv(c->fd, c->in + c->have, IN_MAX - c->have, 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
            drop(c);
            return;
        }
        if (n > 0) c->have += (size_t)n;
        if (serve(ep, c) < 0) {
            drop(c);
            return;
        }
        if (n < 0 || c->out != NULL || c->have == IN_MAX) return;
    }
}

static void on_writable(int ep, Conn *c) {
    int done = flush_out(c);
    if (done < 0) {
        drop(c);
        return;
    }
    if (done == 1) {
        watch(ep, c, EPOLLIN, EPOLL_CTL_MOD);
        if (serve(ep, c) < 0) drop(c);
    }
}

static void *run(void *arg) {
    (void)arg;
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
    if (lfd < 0) die("socket");
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    setsockopt(lfd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(lfd, (struct sockaddr *)&addr, sizeof(addr)) < 0) die("bind");
    if (listen(lfd, 4096) < 0) die("listen");
    int ep = epoll_create1(0);
    if (ep < 0) die("epoll_create1");
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev) < 0) die("epoll_ctl");
    pthread_barrier_wait(&listening);
    struct epoll_event events[256];
    for (;;) {
        int n = epoll_wait(ep, events, 256, -1);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) die("epoll_wait");
        for (int i = 0; i < n; i++) {
            Conn *c = events[i].data.ptr;
            if (c == NULL) {  /* the listener: accept what waits */
                int fd;
                while ((fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                    Conn *fresh = calloc(1, sizeof(Conn));
                    if (fresh == NULL) die("calloc");
                    fresh->fd = fd;
                    watch(ep, fresh, EPOLLIN, EPOLL_CTL_ADD);
                }
            } else if (events[i].events & EPOLLOUT) {
                on_writable(ep, c);
            } else {
                on_readable(ep, c);
            }
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s PORT THREADS RESPONSE_FILE\n", argv[0]);
        return 2;
    }
    port = atoi(argv[1]);
    int threads = atoi(argv[2]);
    FILE *f = fopen(argv[3], "rb");
    struct stat st;
    if (f == NULL || fstat(fileno(f), &st) < 0) die(argv[3]);
    char *buf = malloc((size_t)st.st_size);
    if (buf == NULL || fread(buf, 1, (size_t)st.st_size, f) != (size_t)st.st_size) die("read");
    fclose(f);
    canned = buf;
    canned_len = (size_t)st.st_size;
    if (threads < 1 || port <= 0) {
        fprintf(stderr, "PORT and THREADS must be positive\n");
        return 2;
    }
    pthread_barrier_init(&listening, NULL, (unsigned)threads + 1);
    for (int i = 0; i < threads; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, run, NULL) != 0) die("pthread_create");
    }
    pthread_barrier_wait(&listening);
    printf("PORT %d\n", port);
    fflush(stdout);
    pause();
    return 0;
}
