/* SPDX-License-Identifier: MIT */
/*
 * fan_out_fan_in: several workers take jobs from one channel (fan-out) and
 * send their results into one channel (fan-in) that a single reader
 * drains (Go's worker pool, with a WaitGroup that closes `results`).
 *
 * In Go a goroutine waits on the WaitGroup and then closes `results`. Here
 * a pool task opens a scope, spawns the workers into it, joins it (which
 * waits for all of them) and closes `results`: the same shape, but no
 * worker can outlive the pool, and a failing worker stops the others.
 * 12 jobs of 100 ms on 4 workers take 300 ms. Exits 1 unless every result
 * arrived once, each worker did 3 jobs, and it took 300 ms.
 */
#include <stdio.h>

#include "weft.h"

#define JOBS 12
#define WORKERS 4
#define NOW_MS ((long long)(weft_now() / WEFT_MSEC))

typedef struct result {
    int job, square, worker;
} result;

typedef struct pool {
    weft_chan *jobs, *results;
} pool;

typedef struct worker_arg {
    pool *p;
    int id;
} worker_arg;

static int worker(void *arg)
{
    worker_arg *w = arg;
    int job;
    while (weft_chan_recv(w->p->jobs, &job) == 0) { /* fan-out */
        int rc = weft_sleep_for(100 * WEFT_MSEC);   /* the work */
        result r = {job, job * job, w->id};
        if (rc == 0)
            rc = weft_chan_send(w->p->results, &r); /* fan-in */
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* Runs the workers; when the last one is done, closes `results`. */
static int run_pool(void *arg)
{
    pool *p = arg;
    worker_arg w[WORKERS];
    weft_scope *s;
    weft_scope_open(&s, NULL);
    for (int i = 0; i < WORKERS; i++) {
        w[i] = (worker_arg){p, i + 1};
        weft_spawn(s, worker, &w[i]);
    }
    int rc = weft_scope_join(s); /* Go: wg.Wait() */
    weft_scope_free(s);
    weft_chan_close(p->results); /* Go: close(results) */
    weft_chan_close(p->jobs);    /* if a worker failed: stop the feeder */
    return rc;
}

static int feed(void *arg)
{
    pool *p = arg;
    for (int job = 1; job <= JOBS; job++)
        if (weft_chan_send(p->jobs, &job) != 0) /* -EPIPE: pool stopped */
            break;
    weft_chan_close(p->jobs); /* workers drain it, then stop */
    return 0;
}

static int run(void *arg)
{
    pool p;
    weft_scope *s;
    weft_chan_new(&p.jobs, sizeof(int), 0);
    weft_chan_new(&p.results, sizeof(result), 0);
    weft_scope_open(&s, NULL);
    weft_spawn(s, feed, &p);
    weft_spawn(s, run_pool, &p);

    result r;
    int done_by[WORKERS + 1] = {0}, sum = 0;
    while (weft_chan_recv(p.results, &r) == 0) { /* until run_pool closes */
        printf("t=%3lld ms  job %2d -> %3d  (worker %d)\n", NOW_MS, r.job,
               r.square, r.worker);
        done_by[r.worker]++;
        sum += r.square;
    }
    int rc = weft_scope_join(s);
    weft_scope_free(s);
    weft_chan_unref(p.jobs);
    weft_chan_unref(p.results);

    int ok = rc == 0 && sum == 650 && weft_now() == 300 * WEFT_MSEC;
    for (int i = 1; i <= WORKERS; i++)
        ok &= done_by[i] == JOBS / WORKERS;
    printf("sum of squares %d (want 650) after %lld ms: %s\n", sum, NOW_MS,
           ok ? "ok" : "WRONG");
    return ok ? 0 : -1;
}

int main(void)
{
    weft_config cfg = {.workers = 1, .clock = WEFT_CLOCK_VIRTUAL};
    return weft_run(&cfg, run, NULL) == 0 ? 0 : 1;
}
