/* SPDX-License-Identifier: MIT */
/*
 * supervised_pool: a pool of workers that crash now and then, kept alive
 * by a supervisor (Erlang/OTP's one_for_one supervisor, Akka's
 * BackoffSupervisor).
 *
 * Four workers each handle jobs of 10 ms; one job in 40 crashes its
 * worker (a seeded draw, so every run is the same). The supervisor
 * restarts a crashed worker after a backoff (50 ms, doubling up to 400 ms,
 * reset once the worker has stayed up for a second) and prints every exit
 * and restart. At most 50 restarts in 10 s are allowed: more, and the
 * supervisor would give up and return -ECHILD. After 3 s the supervisor
 * is stopped: it stops the workers in reverse start order and returns 0.
 * The virtual clock makes the 3 s take no real time. Exits 1 unless the
 * jobs and the restarts add up.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>

#include "weft.h"

#define MS WEFT_MSEC
#define NWORKERS 4

typedef struct worker {
    char name[16];
    uint64_t rng; /* the worker's draws, seeded */
    long jobs;    /* jobs done, over all its lives */
    long crashes;
} worker;

static uint64_t draw(uint64_t *s)
{
    uint64_t x = *s; /* xorshift64 */
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

/* A worker's life: jobs until one crashes it, or until it is stopped (a
 * cancel: the supervisor gives it 100 ms, and sleeping is where it gets
 * the cancel). */
static int work(void *arg)
{
    worker *w = arg;
    for (;;) {
        int rc = weft_sleep_for(10 * MS); /* a job */
        if (rc)
            return rc; /* -ECANCELED: stopped */
        if (draw(&w->rng) % 40 == 0) {
            w->crashes++;
            return -EIO; /* crashed */
        }
        w->jobs++;
    }
}

static void on_event(void *ctx, const weft_sup_event *e)
{
    long *restarts = ctx;
    long long t = (long long)(e->at / MS);
    switch (e->kind) {
    case WEFT_SUP_EXIT:
        printf("t=%4lld ms  %s exited: %s\n", t, e->child,
               weft_strerror(e->status));
        break;
    case WEFT_SUP_RESTART:
        (*restarts)++;
        printf("t=%4lld ms  %s restarts in %lld ms (%d in the window)\n", t,
               e->child, (long long)(e->delay_ns / MS), e->restarts);
        break;
    case WEFT_SUP_GIVE_UP:
    case WEFT_SUP_ESCALATE:
        printf("t=%4lld ms  giving up on %s\n", t, e->child);
        break;
    }
}

static const weft_retry backoff = {.base_ns = 50 * MS, .cap_ns = 400 * MS};

static int run(void *arg)
{
    (void)arg;
    worker ws[NWORKERS];
    weft_child_spec specs[NWORKERS];
    for (int i = 0; i < NWORKERS; i++) {
        ws[i] = (worker){.rng = 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1)};
        snprintf(ws[i].name, sizeof ws[i].name, "worker%d", i);
        specs[i] = (weft_child_spec){.name = ws[i].name,
                                     .start = work,
                                     .arg = &ws[i],
                                     .restart = WEFT_PERMANENT,
                                     .shutdown_ns = 100 * MS};
    }
    long restarts = 0;
    weft_sup_opts o = {.strategy = WEFT_ONE_FOR_ONE,
                       .intensity = 50,
                       .period_ns = 10 * WEFT_SEC,
                       .backoff = &backoff,
                       .backoff_reset_ns = WEFT_SEC,
                       .name = "pool",
                       .on_event = on_event,
                       .event_ctx = &restarts};
    weft_sup *sup;
    int rc = weft_sup_spawn(NULL, &o, specs, NWORKERS, &sup);
    if (rc)
        return rc;
    int status;
    if (weft_sup_join_until(sup, &status, 3 * WEFT_SEC) == -ETIMEDOUT) {
        printf("t=%4lld ms  stopping the pool\n", (long long)(weft_now() / MS));
        weft_sup_stop(sup);
        weft_sup_join_until(sup, &status, WEFT_NEVER);
    }
    weft_sup_stats ss;
    weft_sup_stats_get(sup, &ss);
    long counted = ss.restarts;
    weft_sup_free(sup);

    long jobs = 0, crashes = 0;
    for (int i = 0; i < NWORKERS; i++) {
        jobs += ws[i].jobs;
        crashes += ws[i].crashes;
    }
    printf("supervisor: %s; %ld jobs, %ld crashes, %ld restarts\n",
           weft_strerror(status), jobs, crashes, restarts);
    /* Every crash was followed by a restart (the supervisor counts the
     * decision, also one still in its backoff at the stop). */
    return status == 0 && crashes > 0 && restarts == crashes &&
                   counted == restarts
               ? 0
               : -1;
}

int main(void)
{
    weft_config cfg = {.workers = 1, .clock = WEFT_CLOCK_VIRTUAL};
    return weft_run(&cfg, run, NULL) == 0 ? 0 : 1;
}
