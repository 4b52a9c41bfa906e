/* SPDX-License-Identifier: MIT */
/*
 * actor_counter: state owned by one task, changed only through its
 * mailbox (an Erlang process or an Akka actor holding a count, a Go
 * goroutine that owns a counter and serves a channel).
 *
 * The counter actor keeps a long that nobody else touches, so it needs no
 * lock. Others tell it "increment" (no reply) or ask it "get" (a reply).
 * Its mailbox holds 16 messages: the 1000 tells push back when it is full,
 * and they are handled in the order sent, so the get that follows them
 * sees all 1000. Exits 1 unless the reply is 1000 and the actor stopped
 * cleanly.
 */
#include <stdio.h>

#include "weft.h"

enum { INCREMENT, GET };

/* The behaviour: handles one message; the counter is its state. */
static int counter(void *state, weft_actor_msg *m)
{
    long *count = state;
    int op = *(int *)m->data;
    if (op == INCREMENT)
        (*count)++;
    else if (op == GET)
        return weft_actor_reply(m, count); /* the asker gets a copy */
    return 0;
}

static int run(void *arg)
{
    (void)arg;
    long count = 0; /* the actor's alone from now on */
    weft_actor_opts o = {.fn = counter,
                         .state = &count,
                         .msg_size = sizeof(int),
                         .reply_size = sizeof(long),
                         .capacity = 16,
                         .name = "counter"};
    weft_actor *c;
    if (weft_actor_spawn(NULL, &o, &c) != 0)
        return -1;

    int inc = INCREMENT, get = GET;
    for (int i = 0; i < 1000; i++)
        if (weft_actor_tell(c, &inc, WEFT_NEVER) != 0) /* waits if full */
            return -1;
    long value = 0;
    int rc = weft_actor_ask(c, &get, &value, WEFT_NEVER);
    printf("count: %ld\n", value);

    /* Handle what is queued (nothing), then exit with status 0. */
    weft_actor_stop(c, WEFT_STOP_DRAIN);
    int status = -1;
    weft_actor_join_until(c, &status, WEFT_NEVER);
    weft_actor_unref(c);
    return rc == 0 && value == 1000 && status == 0 ? 0 : -1;
}

int main(void)
{
    weft_config cfg = {.workers = 1};
    return weft_run(&cfg, run, NULL) == 0 ? 0 : 1;
}
