/* SPDX-License-Identifier: MIT */
/*
 * http: the benchmark's plaintext HTTP/1.1 server on libuv, keep-alive and
 * pipelining. Every request head (everything up to an empty line) in what
 * has been read gets the fixed response; the answers to one read go out in
 * one write.
 *
 * libuv runs one loop per thread, so "all cores" is one thread per online
 * CPU, each with its own loop and its own listening socket on the same
 * port (SO_REUSEPORT: the kernel spreads the connections over them). The
 * sockets are made here and handed to uv_tcp_open, as libuv 1.44 cannot
 * set SO_REUSEPORT itself.
 *
 * Usage: http [PORT] (0 or none: any free port). It listens on 127.0.0.1
 * and prints `LISTEN <port>` on stderr once it accepts.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

static const char response[] = "HTTP/1.1 200 OK\r\nContent-Length: 13\r\n"
                               "Content-Type: text/plain\r\n\r\nHello, World!";
#define RESPONSE_LEN (sizeof(response) - 1)
#define BUF_SIZE (16 * 1024)

struct conn {
    uv_tcp_t tcp;       /* first: a handle pointer is a conn pointer */
    size_t kept;        /* bytes of an unfinished request head in in[] */
    char in[BUF_SIZE];  /* what has been read and not answered */
    char out[BUF_SIZE]; /* answers to the current read */
};

/* A write libuv could not finish at once: the request and its own copy of
 * the bytes left. */
struct pending {
    uv_write_t req;
    char bytes[];
};

static void fail(const char *what, int err)
{
    fprintf(stderr, "http: %s: %s\n", what, uv_strerror(err));
    exit(1);
}

static void freed(uv_handle_t *h)
{
    free(h);
}

static void drop_conn(uv_stream_t *s)
{
    if (!uv_is_closing((uv_handle_t *)s))
        uv_close((uv_handle_t *)s, freed);
}

static void give_buffer(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    struct conn *c = (struct conn *)h;

    (void)hint;
    *buf = uv_buf_init(c->in + c->kept, (unsigned)(BUF_SIZE - c->kept));
}

static void written(uv_write_t *req, int status)
{
    if (status < 0)
        drop_conn(req->handle);
    free(req);
}

/* Sends c->out[0..len): what the socket takes now, and the rest through a
 * queued uv_write (uv_try_write refuses while one is queued, so the order
 * holds). Returns 0, or -1 after dropping the connection. */
static int send_out(struct conn *c, size_t len)
{
    uv_stream_t *s = (uv_stream_t *)&c->tcp;
    uv_buf_t buf = uv_buf_init(c->out, (unsigned)len);
    int sent = uv_try_write(s, &buf, 1);
    struct pending *p;

    if (sent == UV_EAGAIN)
        sent = 0;
    if (sent < 0)
        goto drop;
    if ((size_t)sent == len)
        return 0;
    p = malloc(sizeof(*p) + len - (size_t)sent);
    if (!p)
        goto drop;
    memcpy(p->bytes, c->out + sent, len - (size_t)sent);
    buf = uv_buf_init(p->bytes, (unsigned)(len - (size_t)sent));
    if (uv_write(&p->req, s, &buf, 1, written) == 0)
        return 0;
    free(p);
drop:
    drop_conn(s);
    return -1;
}

static void got_data(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct conn *c = (struct conn *)s;
    size_t end, used = 0, len = 0;
    const char *head;

    (void)buf;
    if (nread < 0) {
        drop_conn(s);
        return;
    }
    end = c->kept + (size_t)nread;
    while ((head = memmem(c->in + used, end - used, "\r\n\r\n", 4))) {
        used = (size_t)(head - c->in) + 4;
        if (len + RESPONSE_LEN > BUF_SIZE) { /* out[] is full: send it */
            if (send_out(c, len) < 0)
                return;
            len = 0;
        }
        memcpy(c->out + len, response, RESPONSE_LEN);
        len += RESPONSE_LEN;
    }
    c->kept = end - used;
    memmove(c->in, c->in + used, c->kept);
    if (c->kept == BUF_SIZE) { /* a request head that does not fit */
        drop_conn(s);
        return;
    }
    if (len)
        send_out(c, len);
}

static void got_conn(uv_stream_t *listener, int status)
{
    struct conn *c;

    if (status < 0) {
        fprintf(stderr, "http: accept: %s\n", uv_strerror(status));
        return;
    }
    c = malloc(sizeof(*c));
    if (!c)
        fail("malloc", UV_ENOMEM);
    c->kept = 0;
    uv_tcp_init(listener->loop, &c->tcp);
    if (uv_accept(listener, (uv_stream_t *)&c->tcp) < 0) {
        drop_conn((uv_stream_t *)&c->tcp);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    uv_read_start((uv_stream_t *)&c->tcp, give_buffer, got_data);
}

/* A listening socket on 127.0.0.1:port that shares the port. */
static int listen_on(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int one = 1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

    if (fd < 0 ||
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0 ||
        bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 1024) < 0)
        fail("listen", uv_translate_sys_error(errno));
    return fd;
}

/* One thread's loop, serving the listening socket fd. */
static void *serve(void *fd)
{
    uv_loop_t loop;
    uv_tcp_t listener;
    int err;

    if ((err = uv_loop_init(&loop)) < 0 ||
        (err = uv_tcp_init(&loop, &listener)) < 0 ||
        (err = uv_tcp_open(&listener, (uv_os_sock_t)(intptr_t)fd)) < 0 ||
        (err = uv_listen((uv_stream_t *)&listener, 1024, got_conn)) < 0)
        fail("loop", err);
    uv_run(&loop, UV_RUN_DEFAULT);
    return NULL;
}

int main(int argc, char **argv)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    char *end = NULL;
    long port = argc > 1 ? strtol(argv[1], &end, 10) : 0;
    struct sockaddr_in a;
    socklen_t alen = sizeof(a);
    pthread_t thread;
    int first;

    if ((end && *end) || port < 0 || port > 65535) {
        fprintf(stderr, "bad port \"%s\"\n", argv[1]);
        return 2;
    }
    /* The first socket picks the port; the others join it before any
     * thread accepts. */
    first = listen_on((int)port);
    if (getsockname(first, (struct sockaddr *)&a, &alen) < 0)
        fail("getsockname", uv_translate_sys_error(errno));
    port = ntohs(a.sin_port);
    for (long i = 1; i < cpus; i++) {
        intptr_t fd = listen_on((int)port);
        if (pthread_create(&thread, NULL, serve, (void *)fd) != 0)
            fail("pthread_create", UV_EAGAIN);
    }
    fprintf(stderr, "LISTEN %ld\n", port);
    serve((void *)(intptr_t)first);
    return 0;
}
