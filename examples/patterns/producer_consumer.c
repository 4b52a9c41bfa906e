/* SPDX-License-Identifier: MIT */
/*
 * producer_consumer: a bounded queue between a fast producer and slow
 * consumers (asyncio.Queue(maxsize), a buffered Go channel, tokio's mpsc).
 *
 * The producer makes 12 jobs as fast as it can; two consumers take 50 ms
 * each per job. The channel holds 4: when it is full the producer's send
 * waits (backpressure), so it never runs more than 4 jobs ahead. When it
 * is done it closes the channel; the consumers drain what is left and see
 * -EPIPE. Exits 1 unless every job was handled once, the producer was
 * held back (it finished at 150 ms, not at 0) and all ended at 300 ms.
 */
#include <stdio.h>

#include "weft.h"

#define JOBS 12
#define CAPACITY 4
#define WORK (50 * WEFT_MSEC)
#define NOW_MS ((long long)(weft_now() / WEFT_MSEC))

static int handled[JOBS]; /* times each job was handled */
static weft_time producer_done;

static int producer(void *arg)
{
    weft_chan *jobs = arg;
    for (int i = 0; i < JOBS; i++) {
        weft_time t = weft_now();
        if (weft_chan_send(jobs, &i) != 0) /* waits while the queue is full */
            break;
        long long waited = (weft_now() - t) / WEFT_MSEC;
        if (waited > 0)
            printf("t=%3lld ms  producer: job %d queued, after %lld ms\n",
                   NOW_MS, i, waited);
    }
    weft_chan_close(jobs); /* no more jobs: consumers drain, then -EPIPE */
    producer_done = weft_now();
    return 0;
}

typedef struct consumer_arg {
    weft_chan *jobs;
    int id;
} consumer_arg;

static int consumer(void *arg)
{
    consumer_arg *c = arg;
    int job;
    while (weft_chan_recv(c->jobs, &job) == 0) {
        int rc = weft_sleep_for(WORK); /* the slow part */
        if (rc != 0)
            return rc;
        handled[job]++;
        printf("t=%3lld ms  consumer %d: job %d done\n", NOW_MS, c->id, job);
    }
    return 0;
}

static int run(void *arg)
{
    weft_chan *jobs;
    weft_scope *s;
    if (weft_chan_new(&jobs, sizeof(int), CAPACITY) != 0)
        return -1;
    weft_scope_open(&s, NULL); /* fail-fast: one failure stops them all */
    weft_spawn(s, producer, jobs);
    consumer_arg c1 = {jobs, 1}, c2 = {jobs, 2};
    weft_spawn(s, consumer, &c1);
    weft_spawn(s, consumer, &c2);
    int rc = weft_scope_join(s);
    weft_scope_free(s);
    weft_chan_unref(jobs); /* the tasks are done with it: join waited */

    int ok = rc == 0 && producer_done == 150 * WEFT_MSEC &&
             weft_now() == JOBS / 2 * WORK;
    for (int i = 0; i < JOBS; i++)
        ok &= handled[i] == 1;
    printf("producer finished at %lld ms, all done at %lld ms: %s\n",
           (long long)(producer_done / WEFT_MSEC), NOW_MS, ok ? "ok" : "WRONG");
    return ok ? 0 : -1;
}

int main(void)
{
    weft_config cfg = {.workers = 1, .clock = WEFT_CLOCK_VIRTUAL};
    return weft_run(&cfg, run, NULL) == 0 ? 0 : 1;
}
