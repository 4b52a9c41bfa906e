/* SPDX-License-Identifier: MIT */
/*
 * nats_jobs: JetStream work-queue throughput through a nats-server with
 * JetStream (nats-server -js).
 *
 *   bench_nats_jobs [N [URL]]    (N: 50000 jobs; URL: $NATS_URL, else
 *                                nats://127.0.0.1:4222)
 *
 * One process, two connections: on one, 16 producer tasks publish N jobs
 * in all (weft_nats_job_publish: each with its key, waiting until the
 * stream has stored it); on the other, 16 consumer tasks take them
 * (weft_nats_job_take, one job per pull, at most 16 held) and ack each
 * (weft_nats_job_ack, waiting for JetStream to confirm), at the same
 * time. Every key must be done once. The clock runs from the first
 * publish to the last confirmed ack. Prints "BENCH nats_jobs weft
 * <jobs/s> jobs/s". The peers (bench/peers/natsc, bench/peers/natsgo) do
 * the same with 16 threads (goroutines) each side: a publish that waits
 * for the stream's acknowledgement, a fetch of one message, a
 * synchronous ack.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "nats.h"

#define SIDE 16 /* producer tasks, and consumer tasks */

static long n_jobs;
static const char *url;
static int64_t t0, elapsed_ns;
static _Atomic long done, next_job;
static _Atomic unsigned char *seen;

static weft_nats_queue *open_queue(weft_nats_conn *c, int *rc)
{
    weft_nats_queue_opts qo = {.stream = "BENCH",
                               .subject = "bench.jobs",
                               .consumer = "workers",
                               .max_in_flight = SIDE};
    weft_nats_queue *q = NULL;
    *rc = weft_nats_queue_new(&q, c, &qo, weft_now() + 10 * WEFT_SEC);
    return q;
}

static int producer(void *arg)
{
    weft_nats_queue *q = arg;
    long i;
    while ((i = atomic_fetch_add(&next_job, 1)) < n_jobs) {
        char key[32];
        int n = snprintf(key, sizeof key, "job-%ld", i);
        int rc = weft_nats_job_publish(q, key, key, (size_t)n,
                                       weft_now() + 10 * WEFT_SEC);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static int consumer(void *arg)
{
    weft_nats_queue *q = arg;
    while (atomic_load(&done) < n_jobs) {
        natsMsg *j;
        int rc = weft_nats_job_take(q, &j, weft_now() + 100 * WEFT_MSEC);
        if (rc == -ETIMEDOUT)
            continue;
        if (rc != 0)
            return rc;
        long i = atol(weft_nats_job_key(j) + 4);
        if (i < 0 || i >= n_jobs || atomic_fetch_add(&seen[i], 1) != 0) {
            weft_nats_job_nak(q, j, 0);
            return -EBADMSG; /* not ours, or done twice */
        }
        if ((rc = weft_nats_job_ack(q, j, weft_now() + 10 * WEFT_SEC)) != 0)
            return rc;
        if (atomic_fetch_add(&done, 1) + 1 == n_jobs)
            elapsed_ns = bench_clock_ns() - t0;
    }
    return 0;
}

static int root(void *arg)
{
    (void)arg;
    weft_scope *sc, *ws;
    weft_nats_conn *c, *d;
    int rc = bench_nats_open(url, &sc, &c, &d);
    if (rc)
        return rc;
    weft_nats_queue *pq = open_queue(c, &rc), *cq = NULL;
    if (rc == 0)
        cq = open_queue(d, &rc);
    if (rc == 0 && (rc = weft_scope_open(&ws, NULL)) == 0) {
        t0 = bench_clock_ns();
        for (int i = 0; i < SIDE; i++) {
            weft_spawn(ws, producer, pq);
            weft_spawn(ws, consumer, cq);
        }
        rc = weft_scope_join(ws);
        weft_scope_free(ws);
    }
    if (cq)
        weft_nats_queue_free(cq);
    if (pq)
        weft_nats_queue_free(pq);
    return bench_nats_close(sc, c, d, rc);
}

int main(int argc, char **argv)
{
    n_jobs = bench_n(argc, argv, 50000);
    url = bench_nats_url(argc, argv);
    seen = calloc((size_t)n_jobs, 1);
    if (!seen)
        return 1;
    weft_config cfg = {0};
    int rc = weft_run(&cfg, root, NULL);
    nats_Close();
    if (rc != 0) {
        fprintf(stderr, "nats_jobs: %s\n", weft_strerror(rc));
        return 1;
    }
    for (long i = 0; i < n_jobs; i++)
        if (seen[i] != 1) {
            fprintf(stderr, "nats_jobs: job-%ld done %d times\n", i, seen[i]);
            return 1;
        }
    printf("BENCH nats_jobs weft %.0f jobs/s\n",
           (double)n_jobs * 1e9 / (double)elapsed_ns);
    return 0;
}
