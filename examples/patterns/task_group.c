/* SPDX-License-Identifier: MIT */
/*
 * task_group: start several tasks together, wait for all of them, and
 * when one fails cancel the others (asyncio.TaskGroup, errgroup, Trio's
 * nursery, a tokio JoinSet).
 *
 * A page needs a user, their orders and some recommendations, fetched at
 * once in a fail-fast scope. The orders service fails after 50 ms: the
 * scope cancels its siblings at that instant (their sleeps return
 * -ECANCELED), join waits until they have really finished, and returns
 * the first error. A cancelled task stays cancelled (every later blocking
 * call returns -ECANCELED too), but may block for cleanup in a shielded
 * scope: here 1 ms, so join returns at 51 ms. Exits 1 unless join
 * returned -EIO at 51 ms, after both siblings were cancelled and had
 * cleaned up.
 */
#include <errno.h>
#include <stdio.h>

#include "weft.h"

#define MS WEFT_MSEC
#define NOW_MS ((long long)(weft_now() / MS))

typedef struct call {
    const char *name;
    int64_t ms; /* how long the service takes */
    int fails;  /* it answers with -EIO */
    int status; /* what the task returned */
    int cleaned_up;
} call;

/* Called once cancelled: tells the service to forget the request. */
static void cleanup(call *c)
{
    /* Still cancelled: every blocking call says so (level-triggered)... */
    int again = weft_sleep_for(MS);
    /* ...except in a shielded scope, where cleanup may block. */
    weft_scope *shield;
    weft_scope_open(&shield, &(weft_scope_opts){.shield = 1});
    int sent = weft_sleep_for(MS); /* the "forget it" message: 1 ms */
    weft_scope_join(shield);
    weft_scope_free(shield);
    c->cleaned_up = again == -ECANCELED && sent == 0;
}

static int fetch(void *arg)
{
    call *c = arg;
    int rc = weft_sleep_for(c->ms * MS); /* the request */
    if (rc == 0 && c->fails)
        rc = -EIO;
    if (rc == -ECANCELED)
        cleanup(c);
    printf("t=%3lld ms  %-15s %s\n", NOW_MS, c->name, weft_strerror(rc));
    return c->status = rc;
}

static int render_page(void *arg)
{
    call calls[] = {{.name = "user", .ms = 80},
                    {.name = "orders", .ms = 50, .fails = 1},
                    {.name = "recommendations", .ms = 300}};
    weft_scope *group;
    weft_scope_open(&group, NULL); /* WEFT_FAIL_FAST */
    for (int i = 0; i < 3; i++)
        weft_spawn(group, fetch, &calls[i]);
    int rc = weft_scope_join(group); /* waits for all three, come what may */
    weft_scope_free(group);
    printf("t=%3lld ms  group: %s\n", NOW_MS, weft_strerror(rc));

    return rc == -EIO && weft_now() == 51 * MS &&
                   calls[0].status == -ECANCELED && calls[0].cleaned_up &&
                   calls[2].status == -ECANCELED && calls[2].cleaned_up
               ? 0
               : -1;
}

int main(void)
{
    weft_config cfg = {.workers = 1, .clock = WEFT_CLOCK_VIRTUAL};
    return weft_run(&cfg, render_page, NULL) == 0 ? 0 : 1;
}
