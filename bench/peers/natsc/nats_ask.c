/* SPDX-License-Identifier: MIT */
/*
 * nats_ask with nats.c alone, from plain threads: one connection
 * subscribes to a subject and answers each request from nats.c's
 * delivery thread (its counter + the int64 asked, 8 bytes back); the main
 * thread makes N natsConnection_Request calls in sequence on another
 * connection; the last answer must be N.
 *
 *   nats_ask [N [URL]]     (URL: $NATS_URL, else nats://127.0.0.1:4222)
 *   prints "BENCH nats_ask natsc <ns/ask> ns/ask"
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nats/nats.h>

static int64_t count;

static void on_request(natsConnection *nc, natsSubscription *sub, natsMsg *m,
                       void *closure)
{
    (void)sub;
    (void)closure;
    int64_t v = 0;
    if (natsMsg_GetDataLength(m) == sizeof v)
        memcpy(&v, natsMsg_GetData(m), sizeof v);
    count += v;
    natsConnection_Publish(nc, natsMsg_GetReply(m), &count, sizeof count);
    natsMsg_Destroy(m);
}

static int64_t clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static natsConnection *connect_to(const char *url)
{
    natsConnection *nc = NULL;
    natsOptions *o = NULL;
    if (natsOptions_Create(&o) != NATS_OK || natsOptions_SetURL(o, url) ||
        natsOptions_SetSendAsap(o, true) || natsConnection_Connect(&nc, o)) {
        fprintf(stderr, "nats_ask: connect %s: %s\n", url,
                nats_GetLastError(NULL));
        exit(1);
    }
    natsOptions_Destroy(o);
    return nc;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 20000;
    const char *url = argc > 2             ? argv[2]
                      : getenv("NATS_URL") ? getenv("NATS_URL")
                                           : "nats://127.0.0.1:4222";
    if (n <= 0)
        return 2;
    natsConnection *c = connect_to(url), *d = connect_to(url);
    natsSubscription *sub = NULL;
    if (natsConnection_Subscribe(&sub, d, "bench.ask", on_request, NULL) ||
        natsConnection_Flush(d))
        return 1;
    int64_t one = 1, last = 0;
    int64_t t0 = clock_ns();
    for (long i = 0; i < n; i++) {
        natsMsg *r = NULL;
        natsStatus s =
            natsConnection_Request(&r, c, "bench.ask", &one, sizeof one, 10000);
        if (s != NATS_OK || natsMsg_GetDataLength(r) != sizeof last) {
            fprintf(stderr, "nats_ask: request: %s\n", natsStatus_GetText(s));
            return 1;
        }
        memcpy(&last, natsMsg_GetData(r), sizeof last);
        natsMsg_Destroy(r);
    }
    int64_t elapsed = clock_ns() - t0;
    natsSubscription_Destroy(sub);
    natsConnection_Destroy(c);
    natsConnection_Destroy(d);
    nats_Close();
    if (last != n) {
        fprintf(stderr, "nats_ask: last reply %" PRId64 ", want %ld\n", last,
                n);
        return 1;
    }
    printf("BENCH nats_ask natsc %.0f ns/ask\n", (double)elapsed / n);
    return 0;
}
