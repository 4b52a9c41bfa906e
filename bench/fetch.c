/* SPDX-License-Identifier: MIT */
/*
 * fetch: an HTTP/1.1 client. N GETs (100,000) of http://127.0.0.1:PORT/,
 * whose answer is the http benchmark's "Hello, World!" (13 bytes), 64 in
 * flight, on keep-alive connections. All cores. Value: N / elapsed, in
 * req/s (ns/request on stderr). See bench/README.md; the server is weft's
 * own (examples/http_server.c, bench_http), started by bench/run and
 * bench/compare for every implementation alike; the peer (bench/peers/) is
 * Go's net/http Client (64 goroutines, MaxIdleConnsPerHost 64).
 *
 *   bench_fetch [N [URL]]     URL default http://127.0.0.1:8080/
 *
 * 64 tasks, each with its own CURL easy handle reused for its share of the
 * requests (N/64, the first N%64 tasks one more), each request a
 * weft_curl_perform with a 10 s deadline. libcurl keeps the connections in
 * the worker's multi handle, so each task's requests after its first reuse
 * a connection. A request counts only if it completed with status 200 and
 * a 13-byte body; any other outcome fails the task, which cancels the
 * others (fail-fast scope), and the run exits 1 printing nothing on stdout.
 *
 * The easy handles are made and set up before the clock starts, in main;
 * the clock runs inside the root task from before the first spawn to after
 * the join, so it counts the connections' setup, as the peer's does.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "weft.h"
#include "weft_curl.h"

#define TASKS 64
#define BODY_LEN 13 /* "Hello, World!" */

struct client {
    CURL *easy;  /* its own, reused for every request */
    long count;  /* requests to make */
    long ok;     /* requests that got 200 and the body */
    size_t got;  /* body bytes of the current request */
    int err;     /* the first failure's weft code, for the message */
    long status; /* and its HTTP status */
};

struct bench {
    struct client c[TASKS];
    int64_t elapsed_ns;
};

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg)
{
    struct client *c = arg;
    (void)data;
    c->got += size * nmemb;
    return size * nmemb;
}

static int client(void *arg)
{
    struct client *c = arg;

    for (long i = 0; i < c->count; i++) {
        c->got = 0;
        int err = weft_curl_perform(c->easy, weft_now() + 10 * WEFT_SEC);
        if (err < 0) {
            c->err = err;
            return err;
        }
        long status = 0;
        curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &status);
        if (status != 200 || c->got != BODY_LEN) {
            c->status = status;
            c->err = -EBADMSG;
            return -EBADMSG;
        }
        c->ok++;
    }
    return 0;
}

static int root(void *arg)
{
    struct bench *b = arg;
    weft_scope *s;
    int err, join;
    int64_t start;

    err = weft_scope_open(&s, NULL);
    if (err < 0)
        return err;
    start = bench_clock_ns();
    for (int i = 0; i < TASKS && err >= 0; i++)
        err = weft_spawn(s, client, &b->c[i]);
    join = weft_scope_join(s);
    b->elapsed_ns = bench_clock_ns() - start;
    weft_scope_free(s);
    return err < 0 ? err : join;
}

int main(int argc, char **argv)
{
    static struct bench b;
    weft_config cfg = {.workers = 0}; /* one per online CPU */
    const char *url = argc > 2 ? argv[2] : "http://127.0.0.1:8080/";
    long n = bench_n(argc, argv, 100000), ok = 0;
    int err, rc = 1;

    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "fetch: curl_global_init failed\n");
        return 1;
    }
    for (int i = 0; i < TASKS; i++) {
        struct client *c = &b.c[i];
        c->count = n / TASKS + (i < n % TASKS);
        c->easy = curl_easy_init();
        if (!c->easy ||
            curl_easy_setopt(c->easy, CURLOPT_URL, url) != CURLE_OK ||
            curl_easy_setopt(c->easy, CURLOPT_WRITEFUNCTION, on_body) !=
                CURLE_OK ||
            curl_easy_setopt(c->easy, CURLOPT_WRITEDATA, c) != CURLE_OK ||
            curl_easy_setopt(c->easy, CURLOPT_NOSIGNAL, 1L) != CURLE_OK) {
            fprintf(stderr, "fetch: cannot set up a curl handle\n");
            goto out;
        }
    }
    err = weft_run(&cfg, root, &b);
    for (int i = 0; i < TASKS; i++)
        ok += b.c[i].ok;
    if (err < 0) {
        for (int i = 0; i < TASKS; i++) {
            if (b.c[i].err && b.c[i].err != -ECANCELED) {
                fprintf(stderr, "fetch: %s: %s (status %ld)\n", url,
                        weft_strerror(b.c[i].err), b.c[i].status);
                break;
            }
        }
        fprintf(stderr, "fetch: %s after %ld of %ld requests\n",
                weft_strerror(err), ok, n);
        goto out;
    }
    if (ok != n) {
        fprintf(stderr, "checksum failed: %ld requests succeeded (want %ld)\n",
                ok, n);
        goto out;
    }
    fprintf(stderr, "fetch: %ld requests in %.3f s, %.0f ns/request\n", n,
            (double)b.elapsed_ns / 1e9, (double)b.elapsed_ns / (double)n);
    printf("BENCH fetch weft %.0f req/s\n",
           (double)n / ((double)b.elapsed_ns / 1e9));
    rc = 0;
out:
    for (int i = 0; i < TASKS; i++)
        if (b.c[i].easy)
            curl_easy_cleanup(b.c[i].easy);
    curl_global_cleanup();
    return rc;
}
