/* SPDX-License-Identifier: MIT */
/*
 * fault_server: the HTTP fault server of test/fault_server.h as a
 * program, to run a client against by hand (examples/fetch, curl).
 *
 *   fault_server [--host ADDR] [--port N] [--tls DIR] [--workers N]
 *
 *   --host ADDR   numeric address to listen on (default 127.0.0.1)
 *   --port N      port (default 0: any free one)
 *   --tls DIR     HTTPS with DIR/cert.pem and DIR/key.pem (make them with
 *                 scripts/test-cert.sh DIR)
 *   --workers N   worker threads (default 0: one per CPU)
 *
 * The first line on stdout is the URL base, e.g. "http://127.0.0.1:41234/",
 * written as soon as the server listens. It serves until SIGINT or SIGTERM
 * (weft_main), then closes every connection and exits 0.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* getopt_long */
#endif
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault_server.h"
#include "weft.h"

static struct {
    const char *host; /* --host */
    int port;         /* --port */
    const char *tls;  /* --tls DIR, or NULL */
} opt = {"127.0.0.1", 0, NULL};

static int root(void *arg)
{
    char cert[PATH_MAX], key[PATH_MAX];
    fault_server_opts o = {.host = opt.host, .port = opt.port};
    if (opt.tls) {
        snprintf(cert, sizeof cert, "%s/cert.pem", opt.tls);
        snprintf(key, sizeof key, "%s/key.pem", opt.tls);
        o.cert_file = cert;
        o.key_file = key;
    }
    fault_server *f;
    int err = fault_server_start(NULL, &o, &f);
    if (err) {
        fprintf(stderr, "fault_server: %s:%d%s%s: %s\n", opt.host, opt.port,
                opt.tls ? ", certificate in " : "", opt.tls ? opt.tls : "",
                weft_strerror(err));
        return err;
    }
    const char *br = strchr(opt.host, ':') ? "[" : "";
    printf("%s://%s%s%s:%d/\n", opt.tls ? "https" : "http", br, opt.host,
           *br ? "]" : "", fault_server_port(f));
    fflush(stdout);
    (void)weft_shutdown_wait(WEFT_NEVER); /* -ECANCELED: the signal */
    fault_server_stop(f);
    return 0;
}

static void usage(FILE *to)
{
    fprintf(to, "usage: fault_server [--host ADDR] [--port N] [--tls DIR] "
                "[--workers N]\n");
}

static int number(const char *s, int max)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 0 || v > max) {
        fprintf(stderr, "fault_server: not a number from 0 to %d: '%s'\n", max,
                s);
        exit(2);
    }
    return (int)v;
}

int main(int argc, char **argv)
{
    static const struct option longs[] = {
        {"host", required_argument, NULL, 'H'},
        {"port", required_argument, NULL, 'p'},
        {"tls", required_argument, NULL, 't'},
        {"workers", required_argument, NULL, 'w'},
        {"help", no_argument, NULL, 'h'},
        {0, 0, 0, 0},
    };
    weft_config cfg = {0};
    int c;
    while ((c = getopt_long(argc, argv, "H:p:t:w:h", longs, NULL)) != -1) {
        switch (c) {
        case 'H':
            opt.host = optarg;
            break;
        case 'p':
            opt.port = number(optarg, 65535);
            break;
        case 't':
            opt.tls = optarg;
            break;
        case 'w':
            cfg.workers = number(optarg, 1024);
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc) {
        usage(stderr);
        return 2;
    }
    int err = weft_main_cfg(&cfg, root, NULL);
    return err == 0 || err == -ECANCELED ? 0 : 1;
}
