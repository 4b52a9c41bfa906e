/* SPDX-License-Identifier: MIT */
/*
 * nats_ask: a remote actor's ask round trip through a nats-server.
 *
 *   bench_nats_ask [N [URL]]     (N: 20000 asks; URL: $NATS_URL, else
 *                                nats://127.0.0.1:4222)
 *
 * One process, two connections to the server: one exports a counter
 * actor (weft_nats_export_new: int64 messages and replies), the other
 * makes N weft_nats_ask in sequence, each "add 1, reply with the new
 * value"; the last reply must be N. The clock runs from the first ask to
 * the last reply. Prints "BENCH nats_ask weft <ns/ask> ns/ask". The peers
 * (bench/peers/natsc, bench/peers/natsgo) make the same round trip with a
 * plain request and a subscription that replies.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "nats.h"

static long n_asks;
static const char *url;
static int64_t elapsed_ns, last;

static int counter(void *state, weft_actor_msg *m)
{
    int64_t *count = state, v;
    memcpy(&v, m->data, sizeof v);
    *count += v;
    if (m->kind == WEFT_MSG_ASK)
        weft_actor_reply(m, count);
    return 0;
}

static int root(void *arg)
{
    (void)arg;
    weft_time deadline = weft_now() + 10 * WEFT_SEC;
    weft_scope *sc;
    weft_nats_conn *c, *d;
    int rc = bench_nats_open(url, &sc, &c, &d);
    if (rc)
        return rc;
    static int64_t count;
    weft_actor *a;
    weft_actor_opts ao = {.fn = counter,
                          .state = &count,
                          .msg_size = sizeof(int64_t),
                          .reply_size = sizeof(int64_t),
                          .capacity = 64};
    weft_nats_export *e;
    weft_nats_export_opts eo = {.node = "bench",
                                .msg_size = sizeof(int64_t),
                                .reply_size = sizeof(int64_t),
                                .scope = sc};
    weft_nats_ref r;
    if ((rc = weft_actor_spawn(sc, &ao, &a)) ||
        (rc = weft_nats_export_new(&e, d, a, &eo, deadline)) ||
        (rc = weft_nats_export_ref(e, &r)))
        return rc;
    int64_t one = 1;
    int64_t t0 = bench_clock_ns();
    for (long i = 0; i < n_asks && rc == 0; i++)
        rc = weft_nats_ask(c, &r, &one, sizeof one, &last, sizeof last,
                           weft_now() + 10 * WEFT_SEC);
    elapsed_ns = bench_clock_ns() - t0;
    weft_nats_export_free(e);
    weft_actor_stop(a, WEFT_STOP_NOW);
    weft_actor_unref(a);
    return bench_nats_close(sc, c, d, rc);
}

int main(int argc, char **argv)
{
    n_asks = bench_n(argc, argv, 20000);
    url = bench_nats_url(argc, argv);
    weft_config cfg = {0};
    cfg.workers = 1;
    int rc = weft_run(&cfg, root, NULL);
    nats_Close();
    if (rc != 0) {
        fprintf(stderr, "nats_ask: %s\n", weft_strerror(rc));
        return 1;
    }
    if (last != n_asks) {
        fprintf(stderr, "nats_ask: last reply %lld, want %ld\n",
                (long long)last, n_asks);
        return 1;
    }
    printf("BENCH nats_ask weft %.0f ns/ask\n", (double)elapsed_ns / n_asks);
    return 0;
}
