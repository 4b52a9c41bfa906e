/* SPDX-License-Identifier: MIT */
/*
 * Pattern: a TLS echo server (docs/patterns.md, "A TLS echo server").
 * Built only with the weft_tls module (OpenSSL).
 *
 * One task accepts; each connection gets its own task, which runs the
 * handshake under its own deadline (a client that stalls in it cannot
 * hold the task for longer), then echoes until the client's close_notify,
 * and sends its own. A client on the same runtime checks the echo.
 *
 *   pattern_tls_echo [CERT KEY]
 * Without CERT and KEY it makes a throw-away self-signed certificate
 * with the openssl command, in a temporary directory.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "weft.h"
#include "weft_tls.h"

static weft_tls_ctx *server_ctx, *client_ctx;

/* One connection: handshake, echo, close_notify. */
static int serve(void *arg)
{
    int fd = (int)(intptr_t)arg;
    weft_tls *t = NULL;
    char buf[16384];
    int rc = weft_tls_accept(server_ctx, fd, &t, weft_now() + 5 * WEFT_SEC);
    while (rc == 0) {
        ptrdiff_t n =
            weft_tls_read(t, buf, sizeof buf, weft_now() + 60 * WEFT_SEC);
        if (n == 0) { /* close_notify: the client is done */
            rc = weft_tls_shutdown(t, 0, weft_now() + 5 * WEFT_SEC);
            break;
        }
        if (n < 0) { /* WEFT_TLS_TRUNCATED, a reset, a timeout, a cancel */
            rc = (int)n;
            break;
        }
        rc =
            weft_tls_write(t, buf, (size_t)n, NULL, weft_now() + 10 * WEFT_SEC);
    }
    if (rc < 0 && t)
        fprintf(stderr, "connection: %s (%s)\n", weft_strerror(rc),
                weft_tls_error(t));
    weft_tls_free(t);
    weft_close(fd);
    return 0; /* one connection's failure is its own */
}

static int accept_loop(void *arg)
{
    int lfd = (int)(intptr_t)arg;
    weft_scope *conns;
    weft_scope_open(&conns, &(weft_scope_opts){.policy = WEFT_SERVE});
    for (;;) {
        int fd = weft_accept(lfd, NULL, WEFT_NEVER);
        if (fd == -ECANCELED)
            break;
        if (fd >= 0 && weft_spawn(conns, serve, (void *)(intptr_t)fd) < 0)
            weft_close(fd);
    }
    weft_scope_join(conns);
    weft_scope_free(conns);
    return 0;
}

/* A client: connect, handshake (verifying the name), send, read back,
 * close_notify, and the server's. */
static int client(int port)
{
    int fd = weft_tcp_connect("127.0.0.1", port, weft_now() + 5 * WEFT_SEC);
    if (fd < 0)
        return fd;
    weft_tls *t = NULL;
    int rc = weft_tls_connect(client_ctx, fd, "localhost", &t,
                              weft_now() + 5 * WEFT_SEC);
    const char msg[] = "hello over TLS";
    char back[sizeof msg];
    size_t got = 0;
    if (rc == 0)
        rc = weft_tls_write(t, msg, sizeof msg, NULL, weft_now() + WEFT_SEC);
    while (rc == 0 && got < sizeof msg) {
        ptrdiff_t n = weft_tls_read(t, back + got, sizeof msg - got,
                                    weft_now() + WEFT_SEC);
        rc = n > 0 ? 0 : n == 0 ? -EPIPE : (int)n;
        got += n > 0 ? (size_t)n : 0;
    }
    if (rc == 0) /* ours, then wait for the server's */
        rc =
            weft_tls_shutdown(t, WEFT_TLS_SHUTDOWN_WAIT, weft_now() + WEFT_SEC);
    if (rc == 0 && memcmp(back, msg, sizeof msg) != 0)
        rc = -EBADMSG;
    if (rc < 0)
        fprintf(stderr, "client: %s (%s)\n", weft_strerror(rc),
                t ? weft_tls_error(t) : "");
    else
        printf("echoed \"%s\" over %s\n", back,
               SSL_get_version(weft_tls_ssl(t)));
    weft_tls_free(t);
    weft_close(fd);
    return rc;
}

static int root(void *arg)
{
    (void)arg;
    int lfd = weft_tcp_listen("127.0.0.1", 0, 128, 0);
    if (lfd < 0)
        return lfd;
    weft_scope *server;
    weft_scope_open(&server, NULL);
    weft_spawn(server, accept_loop, (void *)(intptr_t)lfd);
    int rc = client(weft_local_port(lfd));
    weft_scope_cancel(server); /* stop accepting */
    weft_scope_join(server);
    weft_scope_free(server);
    weft_close(lfd);
    return rc;
}

int main(int argc, char **argv)
{
    char dir[] = "/tmp/tls-echo-XXXXXX", cert[64], key[64], cmd[512];
    bool made = argc < 3;
    if (made) {
        if (!mkdtemp(dir))
            return 1;
        snprintf(cert, sizeof cert, "%s/cert.pem", dir);
        snprintf(key, sizeof key, "%s/key.pem", dir);
        snprintf(cmd, sizeof cmd,
                 "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256"
                 " -nodes -days 1 -subj /CN=localhost -addext "
                 "subjectAltName=DNS:localhost -keyout %s -out %s 2>/dev/null",
                 key, cert);
        if (system(cmd) != 0) {
            fprintf(stderr, "tls_echo: openssl req failed\n");
            return 1;
        }
    }
    const char *c = made ? cert : argv[1], *k = made ? key : argv[2];
    int rc = weft_tls_ctx_new(&server_ctx, WEFT_TLS_SERVER,
                              &(weft_tls_opts){.cert_file = c, .key_file = k});
    if (rc == 0) /* trusts the server's certificate alone */
        rc = weft_tls_ctx_new(&client_ctx, WEFT_TLS_CLIENT,
                              &(weft_tls_opts){.ca_file = c});
    if (rc == 0)
        rc = weft_run(NULL, root, NULL);
    weft_tls_ctx_free(client_ctx);
    weft_tls_ctx_free(server_ctx);
    if (made) {
        unlink(cert);
        unlink(key);
        rmdir(dir);
    }
    if (rc < 0)
        fprintf(stderr, "tls_echo: %s\n", weft_strerror(rc));
    return rc < 0;
}
