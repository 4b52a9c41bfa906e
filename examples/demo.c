/* SPDX-License-Identifier: MIT */
/*
 * demo: weft's structured concurrency at work, in well under a second.
 *
 * Four scenes on the real clock: fail-fast, a deadline, a race, and nested
 * cancellation with a shielded cleanup. Tasks note what happened to them;
 * the parent prints the notes after join. Exits 1 if anything differs.
 */
#include <errno.h>
#include <stdio.h>

#include "weft.h"
#define MS WEFT_MSEC

typedef struct job {
    const char *name;
    int64_t ms;  /* how long the job works (sleeps) */
    int result;  /* what it returns if it gets to the end */
    int status;  /* what it did return: filled in by the task */
    int64_t end; /* when it returned, ms after the scene started */
} job;
#define JOB(n, t, r)                                                           \
    {                                                                          \
        .name = (n), .ms = (t), .result = (r)                                  \
    }

static weft_time t0;  /* start of the current scene; set before spawning */
static int surprises; /* things that did not happen as this demo says */
#define EXPECT(c)                                                              \
    ((c) ? (void)0 : (void)(surprises++, printf("  BUG: %s\n", #c)))
#define MS_SINCE_T0 ((long long)((weft_now() - t0) / MS))

/* A job: works for j->ms (weft_sleep_for is a cancellation point), then
 * returns j->result. */
static int work(void *arg)
{
    job *j = arg;
    int rc = weft_sleep_for(j->ms * MS);
    j->status = rc ? rc : j->result;
    j->end = MS_SINCE_T0;
    return j->status;
}

/* Runs the jobs as children of one scope, joins it and prints the notes. */
static int scene(const char *title, weft_scope_opts o, job *jobs, int n)
{
    weft_scope *s;
    printf("%s\n", title);
    t0 = weft_now();
    if (o.deadline)
        o.deadline += t0; /* given relative, made absolute */
    int rc = weft_scope_open(&s, &o);
    if (rc != 0)
        return rc;
    for (int i = 0; i < n; i++) /* named, for diagnostics */
        weft_spawn_ex(s, work, &jobs[i],
                      &(weft_spawn_opts){.name = jobs[i].name});
    rc = weft_scope_join(s);
    for (int i = 0; i < n; i++)
        printf("  %-7s (%3lld ms) ended at %3lld ms: %s\n", jobs[i].name,
               (long long)jobs[i].ms, (long long)jobs[i].end,
               weft_strerror(jobs[i].status));
    if (o.policy == WEFT_FIRST && weft_scope_winner(s) >= 0)
        printf("  winner: %s\n", jobs[weft_scope_winner(s)].name);
    printf("  join returned %d: %s, after %lld ms\n\n", rc, weft_strerror(rc),
           MS_SINCE_T0);
    weft_scope_free(s);
    return rc;
}

/* Scene 4: a task whose wait is cancelled stays cancelled (level-triggered)
 * but may still block for cleanup inside a shielded scope. */
static int cleanup_rc[3]; /* the three sleeps of with_cleanup */
static int with_cleanup(void *arg)
{
    weft_scope *shield;
    weft_scope_opts o = {.shield = 1};
    cleanup_rc[0] = weft_sleep_for(1000 * MS); /* cancelled from outside */
    cleanup_rc[1] = weft_sleep_for(0);         /* still cancelled */
    weft_scope_open(&shield, &o);
    cleanup_rc[2] = weft_sleep_for(10 * MS); /* cleanup: the shield holds */
    weft_scope_join(shield);
    weft_scope_free(shield);
    return cleanup_rc[0];
}

static job nested[2] = {JOB("inner-a", 1000, 0), JOB("inner-b", 1000, 0)};
static int inner_rc; /* what the inner scope's join returned */
static int with_inner_scope(void *arg)
{
    weft_scope *inner;
    weft_scope_open(&inner, NULL); /* a child of the outer scope */
    for (int i = 0; i < 2; i++)
        weft_spawn(inner, work, &nested[i]);
    inner_rc = weft_scope_join(inner);
    weft_scope_free(inner);
    return inner_rc;
}

static int demo(void *arg)
{
    printf("weft %#x, %d workers\n\n", weft_version(), weft_workers());

    job ff[] = {JOB("fetch", 300, 0), JOB("parse", 20, -EIO),
                JOB("index", 300, 0)};
    int rc = scene("1. fail-fast: parse fails, its siblings are cancelled",
                   (weft_scope_opts){.policy = WEFT_FAIL_FAST}, ff, 3);
    EXPECT(rc == -EIO && ff[0].status == -ECANCELED);

    job dl[] = {JOB("fast", 50, 0), JOB("medium", 100, 0), JOB("slow", 400, 0)};
    rc = scene("2. deadline 200 ms: fast jobs finish, the slow one is cut",
               (weft_scope_opts){.policy = WEFT_COLLECT, .deadline = 200 * MS},
               dl, 3);
    EXPECT(rc == -ETIMEDOUT && dl[1].status == 0 && dl[2].status == -ECANCELED);

    job race[] = {JOB("mirror1", 80, 0), JOB("mirror2", 30, 0),
                  JOB("mirror3", 10, -ECONNREFUSED)};
    rc = scene("3. race (WEFT_FIRST): first success wins, failures don't",
               (weft_scope_opts){.policy = WEFT_FIRST}, race, 3);
    EXPECT(rc == 0 && race[0].status == -ECANCELED);

    printf("4. nested: cancelling the outer scope reaches the inner one\n");
    weft_scope *outer;
    t0 = weft_now();
    weft_scope_open(&outer, NULL);
    weft_spawn(outer, with_inner_scope, NULL);
    weft_spawn(outer, with_cleanup, NULL);
    weft_sleep_for(30 * MS);
    weft_scope_cancel(outer);
    rc = weft_scope_join(outer);
    weft_scope_free(outer);
    const char *what[] = {"inner-a",        "inner-b",
                          "inner join",     "cleanup: sleep(1 s)",
                          "then: sleep(0)", "then, shielded: sleep"};
    int got[] = {nested[0].status, nested[1].status, inner_rc,
                 cleanup_rc[0],    cleanup_rc[1],    cleanup_rc[2]};
    for (int i = 0; i < 6; i++)
        printf("  %-21s %s\n", what[i], weft_strerror(got[i]));
    printf("  outer join returned %d: %s, after %lld ms\n", rc,
           weft_strerror(rc), MS_SINCE_T0);
    EXPECT(rc == -ECANCELED && inner_rc == -ECANCELED &&
           cleanup_rc[1] == -ECANCELED && cleanup_rc[2] == 0);
    return surprises ? -EPROTO : 0;
}

int main(void)
{
    return weft_main(demo, NULL) == 0 ? 0 : 1;
}
