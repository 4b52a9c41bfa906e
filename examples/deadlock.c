/* SPDX-License-Identifier: MIT */
/*
 * Two programs that deadlock on purpose, and what weft says about them.
 *
 *   deadlock           a pipeline whose middle stage forgets to close its
 *                      output: the last stage waits for a value that will
 *                      never come, the root waits for the stages. Every
 *                      task is asleep and nothing outside can wake one:
 *                      the runtime reports it on stderr, cancels the
 *                      tasks, and weft_run returns -EDEADLK (exit status 1).
 *   deadlock transfer  two transfers between two accounts, each locking
 *                      the account it takes from, then the one it pays
 *                      into: a cycle of mutex waits. The lock that would
 *                      close it returns -EDEADLK; that transfer lets go,
 *                      backs off and tries again, and both complete
 *                      (exit status 0).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "weft.h"

/* ---- a pipeline that forgets a close ---- */

struct stages {
    weft_chan *numbers, *doubled;
};

static int producer(void *arg)
{
    struct stages *p = arg;
    for (int i = 1; i <= 3; i++)
        if (weft_chan_send(p->numbers, &i) != 0)
            return -1;
    weft_chan_close(p->numbers);
    return 0;
}

static int doubler(void *arg)
{
    struct stages *p = arg;
    int v;
    while (weft_chan_recv(p->numbers, &v) == 0) {
        v *= 2;
        if (weft_chan_send(p->doubled, &v) != 0)
            return -1;
    }
    /* The bug: weft_chan_close(p->doubled) is missing. */
    return 0;
}

static int printer(void *arg)
{
    struct stages *p = arg;
    int v, rc;
    while ((rc = weft_chan_recv(p->doubled, &v)) == 0)
        printf("got %d\n", v);
    return rc == -EPIPE ? 0 : rc;
}

static int pipeline(void *arg)
{
    (void)arg;
    struct stages p;
    weft_scope *s;
    if (weft_chan_new(&p.numbers, sizeof(int), 0) != 0 ||
        weft_chan_new(&p.doubled, sizeof(int), 0) != 0 ||
        weft_scope_open(&s, NULL) != 0)
        return -ENOMEM;
    weft_spawn_ex(s, producer, &p, &(weft_spawn_opts){.name = "producer"});
    weft_spawn_ex(s, doubler, &p, &(weft_spawn_opts){.name = "doubler"});
    weft_spawn_ex(s, printer, &p, &(weft_spawn_opts){.name = "printer"});
    int rc = weft_scope_join(s);
    weft_scope_free(s);
    weft_chan_unref(p.numbers);
    weft_chan_unref(p.doubled);
    return rc;
}

/* ---- two transfers in opposite directions ---- */

struct account {
    weft_mutex lock;
    long balance;
};

struct transfer {
    struct account *from, *to;
    long amount;
    weft_wg *ready; /* both hold their first lock: the cycle is certain */
    int retries;
};

static int transfer(void *arg)
{
    struct transfer *t = arg;
    for (;;) {
        weft_mutex_lock(&t->from->lock);
        if (t->retries == 0) { /* the first time: wait for the other */
            weft_wg_done(t->ready);
            weft_wg_wait(t->ready);
        }
        int rc = weft_mutex_lock(&t->to->lock);
        if (rc == 0) {
            t->from->balance -= t->amount;
            t->to->balance += t->amount;
            weft_mutex_unlock(&t->to->lock);
            weft_mutex_unlock(&t->from->lock);
            return 0;
        }
        weft_mutex_unlock(&t->from->lock);
        if (rc != -EDEADLK)
            return rc;
        /* Chosen to break the cycle: let go, let the other through. */
        printf("transfer of %ld: would deadlock; backing off\n", t->amount);
        t->retries++;
        weft_sleep_for(WEFT_MSEC);
    }
}

static int transfers(void *arg)
{
    (void)arg;
    struct account a = {WEFT_MUTEX_INIT, 100}, b = {WEFT_MUTEX_INIT, 100};
    weft_wg ready = WEFT_WG_INIT;
    weft_wg_add(&ready, 2);
    struct transfer ab = {&a, &b, 30, &ready, 0};
    struct transfer ba = {&b, &a, 50, &ready, 0};
    weft_scope *s;
    if (weft_scope_open(&s, NULL) != 0)
        return -ENOMEM;
    weft_spawn_ex(s, transfer, &ab, &(weft_spawn_opts){.name = "a to b"});
    weft_spawn_ex(s, transfer, &ba, &(weft_spawn_opts){.name = "b to a"});
    int rc = weft_scope_join(s);
    weft_scope_free(s);
    printf("a: %ld, b: %ld\n", a.balance, b.balance);
    return rc;
}

int main(int argc, char **argv)
{
    bool mutexes = argc > 1 && strcmp(argv[1], "transfer") == 0;
    /* A short grace: a program this small has no plain thread to wait for. */
    weft_config cfg = {.deadlock_grace_ns = 100 * WEFT_MSEC};
    int rc = weft_run(&cfg, mutexes ? transfers : pipeline, NULL);
    if (rc < 0)
        fprintf(stderr, "deadlock: weft_run: %s\n", weft_strerror(rc));
    return rc < 0 ? 1 : 0;
}
