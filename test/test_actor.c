/* SPDX-License-Identifier: MIT */
/*
 * Actors: tell and ask, full mailboxes, deadlines and cancels of asks
 * (the late reply dropped), failures with asks queued, stop, handles after
 * the exit, monitors, the registry, a million tells across two workers,
 * misuse.
 */
#include <limits.h>
#include <pthread.h>

#include "t.h"

#include "actor/struct.h" /* weft__actor_run_with, an actor's monitors */

#define MS WEFT_MSEC

/* ---- a test actor: a counter that does what its messages say ---- */

enum {
    OP_INC,     /* n++ */
    OP_GET,     /* nothing but the reply */
    OP_SLEEP,   /* sleeps v ns */
    OP_GATE,    /* waits for the gate; then fails with v if v < 0 */
    OP_FAIL,    /* returns v */
    OP_STOP,    /* returns WEFT_ACTOR_STOP */
    OP_NOREPLY, /* returns 0 without replying */
    OP_ERR,     /* replies with the error v, then tries to reply again */
    OP_SEQ,     /* from's v-th message: checks the order, n++ */
    OP_CANCEL,  /* cancels the box's scope `cancel` and returns 0 */
};

typedef struct msg_t {
    int op;
    int from;
    long v;
} msg_t;

#define NORDER 64
#define NSEND 8

typedef struct box {
    long n;       /* the counter */
    long handled; /* messages and DOWNs handled */
    long asks;    /* asks handled */
    weft_event gate;
    int reply_rc;  /* weft_actor_reply's return, last time */
    int again_rc;  /* OP_ERR: the second reply's */
    int tell_rply; /* weft_actor_reply on a tell */
    long downs;
    int down_status;
    long down_id;
    int order[NORDER]; /* ops in the order handled; -1 a DOWN */
    int norder;
    long seq[NSEND];
    long bad; /* OP_SEQ out of order */
    int starts, stops, stop_status;
    int start_rc;
    weft_scope *cancel; /* OP_CANCEL's */
} box;

static int behave(void *st, weft_actor_msg *m)
{
    box *b = st;
    b->handled++;
    if (m->kind == WEFT_MSG_DOWN) {
        b->downs++;
        b->down_status = m->down_status;
        b->down_id = m->monitor;
        ASSERT(m->down != NULL && m->data == NULL);
        if (b->norder < NORDER)
            b->order[b->norder++] = -1;
        return 0;
    }
    msg_t *x = m->data;
    if (b->norder < NORDER)
        b->order[b->norder++] = x->op;
    if (m->kind == WEFT_MSG_ASK)
        b->asks++;
    int rc;
    switch (x->op) {
    case OP_INC:
        b->n++;
        break;
    case OP_SLEEP:
        if ((rc = weft_sleep_for(x->v)) != 0)
            return rc;
        break;
    case OP_GATE:
        if ((rc = weft_event_wait(&b->gate)) != 0)
            return rc;
        if (x->v < 0)
            return (int)x->v;
        break;
    case OP_FAIL:
        return (int)x->v;
    case OP_STOP:
        return WEFT_ACTOR_STOP;
    case OP_NOREPLY:
        return 0;
    case OP_ERR: {
        long r = 5;
        b->reply_rc = weft_actor_reply_error(m, (int)x->v);
        b->again_rc = weft_actor_reply(m, &r);
        return 0;
    }
    case OP_CANCEL:
        if ((rc = weft_scope_cancel(b->cancel)) != 0)
            return rc;
        break;
    case OP_SEQ:
        if (x->from < 0 || x->from >= NSEND || b->seq[x->from] != x->v)
            b->bad++;
        else
            b->seq[x->from]++;
        b->n++;
        break;
    default:
        break;
    }
    long r = b->n;
    if (m->kind == WEFT_MSG_ASK)
        b->reply_rc = weft_actor_reply(m, &r);
    else
        b->tell_rply = weft_actor_reply(m, &r);
    return 0;
}

static int box_start(void *st)
{
    box *b = st;
    b->starts++;
    return b->start_rc;
}

static void box_stop(void *st, int status)
{
    box *b = st;
    b->stops++;
    b->stop_status = status;
}

static weft_actor_opts box_opts(box *b, int cap)
{
    return (weft_actor_opts){.fn = behave,
                             .state = b,
                             .msg_size = sizeof(msg_t),
                             .reply_size = sizeof(long),
                             .capacity = cap,
                             .name = "box",
                             .on_start = box_start,
                             .on_stop = box_stop};
}

static weft_actor *spawn_box(box *b, int cap)
{
    weft_actor_opts o = box_opts(b, cap);
    weft_actor *a = NULL;
    ASSERT_EQ(weft_actor_spawn(NULL, &o, &a), 0);
    ASSERT(a != NULL);
    return a;
}

/* A scope in which actors may fail without cancelling anything. */
static weft_scope *collect_open(void)
{
    weft_scope *s = NULL;
    ASSERT_EQ(weft_scope_open(&s, &(weft_scope_opts){.policy = WEFT_COLLECT}),
              0);
    return s;
}

static weft_actor *spawn_box_in(weft_scope *s, box *b, int cap)
{
    weft_actor_opts o = box_opts(b, cap);
    weft_actor *a = NULL;
    ASSERT_EQ(weft_actor_spawn(s, &o, &a), 0);
    return a;
}

static int tell_op(weft_actor *a, int op, long v)
{
    msg_t m = {.op = op, .v = v};
    return weft_actor_tell(a, &m, WEFT_NEVER);
}

static int ask_op(weft_actor *a, int op, long v, long *reply,
                  weft_time deadline)
{
    msg_t m = {.op = op, .v = v};
    return weft_actor_ask(a, &m, reply, deadline);
}

/* An asking (or telling) task: its result in rc, its reply in r. */
typedef struct asker {
    weft_actor *a;
    int op;
    long v;
    bool tell;
    weft_time deadline;
    int rc;
    long r;
    weft_time at; /* when the call returned */
    bool done;
} asker;

static int asker_fn(void *arg)
{
    asker *k = arg;
    msg_t m = {.op = k->op, .v = k->v};
    k->r = -7;
    k->rc = k->tell ? weft_actor_tell(k->a, &m, k->deadline)
                    : weft_actor_ask(k->a, &m, &k->r, k->deadline);
    k->at = weft_now();
    k->done = true;
    return 0;
}

/* Stops a (how), waits for its exit and drops the reference: its state,
 * on the caller's stack, is not touched afterwards. */
static void end_actor(weft_actor *a, int how)
{
    ASSERT_EQ(weft_actor_stop(a, how), 0);
    ASSERT_EQ(weft_actor_join_until(a, NULL, WEFT_NEVER), 0);
    ASSERT_EQ(weft_actor_unref(a), 0);
}

/* Lets the actors just spawned start and park (virtual clock). */
static void settle(void)
{
    ASSERT_EQ(weft_sleep_for(MS), 0);
}

/* ---- tell and ask ---- */

static int basics_main(void *arg)
{
    (void)arg;
    box b = {0};
    ASSERT(weft_actor_self() == NULL);
    weft_actor *a = spawn_box(&b, 4);
    ASSERT_EQ(tell_op(a, OP_INC, 0), 0);
    ASSERT_EQ(tell_op(a, OP_INC, 0), 0);
    ASSERT_EQ(weft_actor_queued(a), 2); /* it has not run yet */
    long r = 0;
    ASSERT_EQ(ask_op(a, OP_INC, 0, &r, WEFT_NEVER), 0);
    ASSERT_EQ(r, 3);
    ASSERT_EQ(ask_op(a, OP_GET, 0, NULL, WEFT_NEVER), 0); /* reply dropped */
    ASSERT_EQ(b.reply_rc, 0);
    ASSERT_EQ(b.tell_rply, -EINVAL); /* a tell has nobody to reply to */
    ASSERT_EQ(weft_actor_queued(a), 0);
    ASSERT_EQ(b.starts, 1);
    ASSERT_EQ(b.stops, 0);
    ASSERT_EQ(weft_actor_stop(a, WEFT_STOP_DRAIN), 0);
    int st = 1;
    ASSERT_EQ(weft_actor_join_until(a, &st, WEFT_NEVER), 0);
    ASSERT_EQ(st, 0);
    ASSERT_EQ(b.stops, 1);
    ASSERT_EQ(b.stop_status, 0);
    ASSERT_EQ(weft_actor_unref(a), 0);
    return 0;
}

TEST(tell_ask_basics)
{
    ASSERT_EQ(t_run_virtual(1, basics_main, NULL), 0);
}

/* The seed's counter: 1000 increments, then a get. */
static int counter_main(void *arg)
{
    int cap = *(int *)arg;
    box b = {0};
    weft_actor *a = spawn_box(&b, cap);
    for (int i = 0; i < 1000; i++)
        ASSERT_EQ(tell_op(a, OP_INC, 0), 0);
    long r = 0;
    ASSERT_EQ(ask_op(a, OP_GET, 0, &r, WEFT_NEVER), 0);
    ASSERT_EQ(r, 1000);
    ASSERT_EQ(b.handled, 1001);
    end_actor(a, WEFT_STOP_NOW); /* it runs on until it stops */
    return 0;
}

TEST(counter_1000)
{
    for (int cap = 1; cap <= 2000; cap *= 7) {
        ASSERT_EQ(t_run_virtual(1, counter_main, &cap), 0);
        ASSERT_EQ(t_run_virtual(2, counter_main, &cap), 0);
    }
}

/* A flooded actor lets the other tasks of its worker run: its messages
 * taken without a wait spend its budget as receives do (WEFT__BUDGET), so
 * a task spawned before the actor starts runs long before the five
 * budgets' worth of messages queued for it are handled; and none is lost. */
#define FLOOD_MSGS (5 * WEFT__BUDGET)

typedef struct flood {
    box *b;
    long seen; /* the actor's count when the other task ran */
} flood;

static int flood_other(void *arg)
{
    flood *f = arg;
    f->seen = f->b->n;
    return 0;
}

static int flood_main(void *arg)
{
    (void)arg;
    box b = {0};
    flood f = {.b = &b, .seen = -1};
    /* Not started before this task waits; the actor, spawned last, runs
     * first (newest first) and the other only when the actor yields. */
    ASSERT(weft_spawn(NULL, flood_other, &f) >= 0);
    weft_actor *a = spawn_box(&b, FLOOD_MSGS);
    msg_t m = {.op = OP_INC};
    for (int i = 0; i < FLOOD_MSGS; i++) /* never waits nor yields */
        ASSERT_EQ(weft_actor_try_tell(a, &m), 0);
    long r = 0;
    ASSERT_EQ(ask_op(a, OP_GET, 0, &r, WEFT_NEVER), 0);
    ASSERT_EQ(r, FLOOD_MSGS);
    if (f.seen <= 0 || f.seen > WEFT__BUDGET)
        T_FAIL("the other task ran after %ld messages, not 1 to %d", f.seen,
               WEFT__BUDGET);
    end_actor(a, WEFT_STOP_DRAIN);
    ASSERT_EQ(b.handled, FLOOD_MSGS + 1);
    return 0;
}

TEST(flooded_actor_lets_others_run)
{
    ASSERT_EQ(t_run_virtual(1, flood_main, NULL), 0);
    ASSERT_EQ(t_run_mono(1, flood_main, NULL), 0);
}

/* ---- a full mailbox ---- */

typedef struct opener {
    weft_event *gate;
    weft_time at;
} opener;

static int opener_fn(void *arg)
{
    opener *o = arg;
    ASSERT_EQ(weft_sleep_until(o->at), 0);
    return weft_event_set(o->gate);
}

static int full_main(void *arg)
{
    (void)arg;
    box b = {0};
    weft_actor *a = spawn_box(&b, 2);
    settle(); /* t = 1 ms: the actor waits for a message */
    ASSERT_EQ(tell_op(a, OP_GATE, 0), 0); /* handed to it */
    ASSERT_EQ(tell_op(a, OP_INC, 0), 0);
    ASSERT_EQ(tell_op(a, OP_INC, 0), 0);
    ASSERT_EQ(weft_actor_queued(a), 2); /* full */
    msg_t m = {.op = OP_INC};
    ASSERT_EQ(weft_actor_try_tell(a, &m), -EAGAIN);
    /* A tell until a deadline: the actor is stuck at its gate. */
    ASSERT_EQ(weft_actor_tell(a, &m, 6 * MS), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), 6 * MS);
    ASSERT_EQ(weft_actor_queued(a), 2);               /* nothing queued */
    ASSERT_EQ(weft_actor_tell(a, &m, 0), -ETIMEDOUT); /* past: at once */
    ASSERT_EQ(weft_now(), 6 * MS);
    /* The gate opens at 10 ms: the blocked tell goes in then. */
    opener op = {.gate = &b.gate, .at = 10 * MS};
    spawn(opener_fn, &op);
    ASSERT_EQ(weft_actor_tell(a, &m, WEFT_NEVER), 0);
    ASSERT_EQ(weft_now(), 10 * MS);
    long r = 0;
    ASSERT_EQ(ask_op(a, OP_GET, 0, &r, WEFT_NEVER), 0);
    ASSERT_EQ(r, 3);
    ASSERT_EQ(b.handled, 5);
    end_actor(a, WEFT_STOP_DRAIN);
    return 0;
}

TEST(full_mailbox_blocks)
{
    ASSERT_EQ(t_run_virtual(1, full_main, NULL), 0);
}

/* A tell blocked on a full mailbox is cancelled: nothing queued. */
static int full_cancel_main(void *arg)
{
    (void)arg;
    box b = {0};
    weft_actor *a = spawn_box(&b, 1);
    settle();
    ASSERT_EQ(tell_op(a, OP_GATE, 0), 0);
    ASSERT_EQ(tell_op(a, OP_INC, 0), 0);
    weft_scope *s = scope_open();
    asker k = {.a = a, .op = OP_INC, .tell = true, .deadline = WEFT_NEVER};
    spawn(asker_fn, &k);
    settle(); /* it waits for room */
    ASSERT(!k.done);
    ASSERT_EQ(weft_scope_cancel(s), 0);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT(k.done);
    ASSERT_EQ(k.rc, -ECANCELED);
    ASSERT_EQ(weft_actor_queued(a), 1);
    ASSERT_EQ(weft_event_set(&b.gate), 0);
    long r = 0;
    ASSERT_EQ(ask_op(a, OP_GET, 0, &r, WEFT_NEVER), 0);
    ASSERT_EQ(r, 1); /* the cancelled tell never went in */
    end_actor(a, WEFT_STOP_NOW);
    return 0;
}

TEST(tell_cancelled_while_full)
{
    ASSERT_EQ(t_run_virtual(1, full_cancel_main, NULL), 0);
}

/* ---- asks that give up ---- */

/* In a frame of its own, reused after it returns: a late reply written
 * into it would be a use after return (ASan). */
static __attribute__((noinline)) int timed_ask(weft_actor *a, int op, long v,
                                               weft_time deadline)
{
    long r = -7;
    int rc = ask_op(a, op, v, &r, deadline);
    ASSERT_EQ(r, -7);
    return rc;
}

static int slow_main(void *arg)
{
    (void)arg;
    box b = {0};
    weft_actor *a = spawn_box(&b, 4);
    settle();
    /* Being handled (a 100 ms sleep) when the deadline comes. */
    ASSERT_EQ(timed_ask(a, OP_SLEEP, 100 * MS, 31 * MS), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), 31 * MS);
    /* Queued behind it when its deadline comes. */
    ASSERT_EQ(timed_ask(a, OP_INC, 0, 41 * MS), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), 41 * MS);
    ASSERT_EQ(weft_actor_queued(a), 1); /* still queued: it will be handled */
    ASSERT_EQ(timed_ask(a, OP_GET, 0, 0), -ETIMEDOUT); /* past: not queued */
    ASSERT_EQ(weft_actor_queued(a), 1);
    long r = 0;
    ASSERT_EQ(ask_op(a, OP_GET, 0, &r, WEFT_NEVER), 0);
    ASSERT_EQ(weft_now(), 101 * MS);
    ASSERT_EQ(r, 1);      /* the abandoned increment was handled */
    ASSERT_EQ(b.asks, 3); /* its reply, and the sleep's, were dropped */
    ASSERT_EQ(b.reply_rc, 0);
    end_actor(a, WEFT_STOP_NOW);
    return 0;
}

TEST(ask_deadline_slow_actor)
{
    ASSERT_EQ(t_run_virtual(1, slow_main, NULL), 0);
}

/* Askers cancelled while their ask is handled, queued in the ring, and
 * waiting for room. */
static int ask_cancel_main(void *arg)
{
    (void)arg;
    box b = {0};
    weft_actor *a = spawn_box(&b, 1);
    settle();
    weft_scope *s = scope_open();
    asker k1 = {.a = a, .op = OP_GATE, .deadline = WEFT_NEVER};
    spawn(asker_fn, &k1);
    settle(); /* k1's ask is being handled: the actor waits at its gate */
    asker k2 = {.a = a, .op = OP_INC, .deadline = WEFT_NEVER};
    spawn(asker_fn, &k2);
    settle(); /* k2's in the ring (full) */
    asker k3 = {.a = a, .op = OP_INC, .deadline = WEFT_NEVER};
    spawn(asker_fn, &k3);
    settle(); /* k3's waits for room */
    ASSERT_EQ(weft_actor_queued(a), 1);
    ASSERT(!k1.done && !k2.done && !k3.done);
    ASSERT_EQ(weft_scope_cancel(s), 0);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(k1.rc, -ECANCELED);
    ASSERT_EQ(k2.rc, -ECANCELED);
    ASSERT_EQ(k3.rc, -ECANCELED);
    ASSERT_EQ(k1.r, -7);
    ASSERT_EQ(weft_now(), 4 * MS);
    ASSERT_EQ(weft_actor_queued(a), 1); /* k2's stays; k3's never went in */
    ASSERT_EQ(weft_event_set(&b.gate), 0);
    long r = 0;
    ASSERT_EQ(ask_op(a, OP_GET, 0, &r, WEFT_NEVER), 0);
    ASSERT_EQ(r, 1);      /* k2's increment, not k3's */
    ASSERT_EQ(b.asks, 3); /* k1's, k2's, this one */
    ASSERT_EQ(b.reply_rc, 0);
    end_actor(a, WEFT_STOP_NOW);
    return 0;
}

TEST(ask_cancelled)
{
    ASSERT_EQ(t_run_virtual(1, ask_cancel_main, NULL), 0);
}

/* The actor fails while one ask is handled, two are queued and an ask and
 * a tell wait for room: every one of them gets -ESRCH. */
static int fail_main(void *arg)
{
    (void)arg;
    box b = {0};
    weft_scope *fs = collect_open();
    weft_actor *a = spawn_box_in(fs, &b, 2);
    settle();
    weft_scope *s = scope_open();
    asker k[5] = {
        {.a = a, .op = OP_GATE, .v = -EIO, .deadline = WEFT_NEVER},
        {.a = a, .op = OP_INC, .deadline = WEFT_NEVER},
        {.a = a, .op = OP_INC, .deadline = WEFT_NEVER},
        {.a = a, .op = OP_INC, .deadline = WEFT_NEVER},
        {.a = a, .op = OP_INC, .tell = true, .deadline = WEFT_NEVER},
    };
    for (int i = 0; i < 5; i++) {
        spawn(asker_fn, &k[i]);
        settle();
    }
    ASSERT_EQ(weft_actor_queued(a), 2);
    ASSERT_EQ(weft_event_set(&b.gate), 0);
    int st = 0;
    ASSERT_EQ(weft_actor_join_until(a, &st, WEFT_NEVER), 0);
    ASSERT_EQ(st, -EIO);
    scope_end(s);
    for (int i = 0; i < 5; i++) {
        ASSERT(k[i].done);
        ASSERT_EQ(k[i].rc, -ESRCH);
    }
    ASSERT_EQ(b.n, 0);
    ASSERT_EQ(b.stops, 1);
    ASSERT_EQ(b.stop_status, -EIO);
    ASSERT_EQ(tell_op(a, OP_INC, 0), -ESRCH);
    ASSERT_EQ(weft_scope_join(fs), 0);
    int cst = 0;
    ASSERT_EQ(weft_scope_status(fs, 0, &cst), 0); /* the actor's task */
    ASSERT_EQ(cst, -EIO);
    ASSERT_EQ(weft_scope_free(fs), 0);
    ASSERT_EQ(weft_actor_unref(a), 0);
    return 0;
}

TEST(failure_fails_asks)
{
    ASSERT_EQ(t_run_virtual(1, fail_main, NULL), 0);
}

static int noreply_main(void *arg)
{
    (void)arg;
    box b = {0};
    weft_actor *a = spawn_box(&b, 2);
    long r = -7;
    ASSERT_EQ(ask_op(a, OP_NOREPLY, 0, &r, WEFT_NEVER), -ENOMSG);
    ASSERT_EQ(r, -7);
    ASSERT_EQ(ask_op(a, OP_ERR, -EPROTO, &r, WEFT_NEVER), -EPROTO);
    ASSERT_EQ(r, -7);
    ASSERT_EQ(b.reply_rc, 0);
    ASSERT_EQ(b.again_rc, -EALREADY);
    /* The behaviour stops with an ask unanswered: -ESRCH. */
    ASSERT_EQ(ask_op(a, OP_STOP, 0, &r, WEFT_NEVER), -ESRCH);
    int st = 1;
    ASSERT_EQ(weft_actor_join_until(a, &st, WEFT_NEVER), 0);
    ASSERT_EQ(st, 0);
    ASSERT_EQ(weft_actor_unref(a), 0);
    return 0;
}

TEST(ask_no_reply_and_errors)
{
    ASSERT_EQ(t_run_virtual(1, noreply_main, NULL), 0);
}

/* ---- stop ---- */

static int drain_main(void *arg)
{
    (void)arg;
    box b = {0};
    weft_actor *a = spawn_box(&b, 8);
    settle();
    ASSERT_EQ(tell_op(a, OP_GATE, 0), 0);
    for (int i = 0; i < 3; i++)
        ASSERT_EQ(tell_op(a, OP_INC, 0), 0);
    weft_scope *s = scope_open();
    asker k = {.a = a, .op = OP_GET, .deadline = WEFT_NEVER};
    spawn(asker_fn, &k);
    settle();
    ASSERT_EQ(weft_actor_queued(a), 4);
    ASSERT_EQ(weft_actor_stop(a, WEFT_STOP_DRAIN), 0);
    ASSERT_EQ(weft_actor_stop(a, WEFT_STOP_DRAIN), 0); /* idempotent */
    ASSERT_EQ(tell_op(a, OP_INC, 0), -ESRCH);
    msg_t m = {.op = OP_INC};
    ASSERT_EQ(weft_actor_try_tell(a, &m), -ESRCH);
    ASSERT_EQ(ask_op(a, OP_GET, 0, NULL, WEFT_NEVER), -ESRCH);
    ASSERT_EQ(weft_event_set(&b.gate), 0);
    int st = 1;
    ASSERT_EQ(weft_actor_join_until(a, &st, WEFT_NEVER), 0);
    ASSERT_EQ(st, 0);
    scope_end(s);
    ASSERT_EQ(k.rc, 0);
    ASSERT_EQ(k.r, 3); /* everything queued was handled */
    ASSERT_EQ(b.n, 3);
    ASSERT_EQ(weft_actor_stop(a, WEFT_STOP_DRAIN), -ESRCH);
    ASSERT_EQ(weft_actor_unref(a), 0);
    return 0;
}

TEST(stop_drain)
{
    ASSERT_EQ(t_run_virtual(1, drain_main, NULL), 0);
}

static int now_main(void *arg)
{
    (void)arg;
    box b = {0};
    weft_actor *a = spawn_box(&b, 2);
    settle();
    ASSERT_EQ(tell_op(a, OP_GATE, 0), 0);
    weft_scope *s = scope_open();
    asker k[3] = {
        {.a = a, .op = OP_INC, .deadline = WEFT_NEVER},
        {.a = a, .op = OP_INC, .deadline = WEFT_NEVER},
        {.a = a, .op = OP_INC, .deadline = WEFT_NEVER},
    };
    for (int i = 0; i < 3; i++)
        spawn(asker_fn, &k[i]);
    settle(); /* two queued, one waits for room */
    ASSERT_EQ(weft_actor_queued(a), 2);
    /* The behaviour blocks at its gate: the stop cancels it. */
    ASSERT_EQ(weft_actor_stop(a, WEFT_STOP_NOW), 0);
    int st = 1;
    ASSERT_EQ(weft_actor_join_until(a, &st, WEFT_NEVER), 0);
    ASSERT_EQ(st, -ECANCELED);
    ASSERT_EQ(weft_now(), MS * 2); /* at once */
    scope_end(s);
    for (int i = 0; i < 3; i++)
        ASSERT_EQ(k[i].rc, -ESRCH);
    ASSERT_EQ(b.n, 0);
    ASSERT_EQ(b.stop_status, -ECANCELED);
    ASSERT_EQ(weft_actor_unref(a), 0);

    /* An idle actor, and a DRAIN hurried by a NOW. */
    box b2 = {0};
    a = spawn_box(&b2, 2);
    settle();
    ASSERT_EQ(tell_op(a, OP_SLEEP, 50 * MS), 0);
    ASSERT_EQ(tell_op(a, OP_INC, 0), 0);
    ASSERT_EQ(weft_actor_stop(a, WEFT_STOP_DRAIN), 0);
    ASSERT_EQ(weft_sleep_for(MS), 0);
    ASSERT_EQ(weft_actor_stop(a, WEFT_STOP_NOW), 0);
    ASSERT_EQ(weft_actor_join_until(a, &st, WEFT_NEVER), 0);
    ASSERT_EQ(st, -ECANCELED);
    ASSERT_EQ(b2.n, 0);
    ASSERT_EQ(weft_now(), 4 * MS);
    ASSERT_EQ(weft_actor_unref(a), 0);
    return 0;
}

TEST(stop_now)
{
    ASSERT_EQ(t_run_virtual(1, now_main, NULL), 0);
}

/* Handles used after the exit, and after the scope that ran the actor
 * was joined; a scope's cancel stops the actor with -ECANCELED. */
static int after_main(void *arg)
{
    (void)arg;
    box b = {0};
    weft_scope *s = scope_open();
    weft_actor_opts o = box_opts(&b, 2);
    weft_actor *a;
    ASSERT_EQ(weft_actor_spawn(s, &o, &a), 0);
    ASSERT_EQ(tell_op(a, OP_INC, 0), 0);
    ASSERT_EQ(tell_op(a, OP_STOP, 0), 0);
    scope_end(s); /* the scope waited for the actor */
    ASSERT_EQ(b.n, 1);
    msg_t m = {.op = OP_INC};
    ASSERT_EQ(weft_actor_tell(a, &m, WEFT_NEVER), -ESRCH);
    ASSERT_EQ(weft_actor_try_tell(a, &m), -ESRCH);
    ASSERT_EQ(weft_actor_ask(a, &m, NULL, WEFT_NEVER), -ESRCH);
    ASSERT_EQ(weft_actor_stop(a, WEFT_STOP_NOW), -ESRCH);
    ASSERT_EQ(weft_actor_queued(a), 0);
    int st = 1;
    ASSERT_EQ(weft_actor_join_until(a, &st, 0), 0);
    ASSERT_EQ(st, 0);
    weft_actor *extra = weft_actor_ref(a);
    ASSERT(extra == a);
    ASSERT_EQ(weft_actor_unref(a), 0);
    ASSERT_EQ(weft_actor_unref(extra), 0);

    /* A cancel of the actor's scope. */
    box b2 = {0};
    s = scope_open();
    o = box_opts(&b2, 2);
    ASSERT_EQ(weft_actor_spawn(s, &o, &a), 0);
    settle();
    ASSERT_EQ(weft_scope_cancel(s), 0);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(weft_actor_join_until(a, &st, WEFT_NEVER), 0);
    ASSERT_EQ(st, -ECANCELED);
    ASSERT_EQ(b2.stop_status, -ECANCELED);
    ASSERT_EQ(weft_actor_unref(a), 0);

    /* A cancel from above while the actor is busy: it handles nothing
     * after the message in hand, though more are queued (the loop looks
     * at its scope's cancel word before each). */
    box b5 = {0};
    s = scope_open();
    b5.cancel = s;
    o = box_opts(&b5, 4);
    ASSERT_EQ(weft_actor_spawn(s, &o, &a), 0);
    ASSERT_EQ(tell_op(a, OP_GATE, 0), 0);
    ASSERT_EQ(tell_op(a, OP_CANCEL, 0), 0);
    ASSERT_EQ(tell_op(a, OP_INC, 0), 0);
    ASSERT_EQ(tell_op(a, OP_INC, 0), 0);
    settle(); /* at its gate, three queued */
    ASSERT_EQ(weft_event_set(&b5.gate), 0);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(weft_actor_join_until(a, &st, WEFT_NEVER), 0);
    ASSERT_EQ(st, -ECANCELED);
    ASSERT_EQ(b5.n, 0);
    ASSERT_EQ(b5.norder, 2); /* the gate and the cancel */
    ASSERT_EQ(b5.stop_status, -ECANCELED);
    ASSERT_EQ(weft_actor_unref(a), 0);

    /* A failed start: no message is handled, no on_stop. */
    box b3 = {.start_rc = -EIO};
    s = collect_open();
    a = spawn_box_in(s, &b3, 2);
    ASSERT_EQ(weft_actor_join_until(a, &st, WEFT_NEVER), 0);
    ASSERT_EQ(st, -EIO);
    ASSERT_EQ(b3.starts, 1);
    ASSERT_EQ(b3.stops, 0);
    ASSERT_EQ(tell_op(a, OP_INC, 0), -ESRCH);
    scope_end(s);
    ASSERT_EQ(weft_actor_unref(a), 0);

    /* A wait that times out, then one that is cancelled: nothing changes. */
    box b4 = {0};
    a = spawn_box(&b4, 2);
    ASSERT_EQ(weft_actor_join_until(a, &st, weft_now() + 5 * MS), -ETIMEDOUT);
    s = scope_open();
    ASSERT_EQ(weft_scope_cancel(s), 0);
    ASSERT_EQ(weft_actor_join_until(a, &st, WEFT_NEVER), -ECANCELED);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);
    long r = 0;
    ASSERT_EQ(ask_op(a, OP_INC, 0, &r, WEFT_NEVER), 0);
    ASSERT_EQ(r, 1);
    end_actor(a, WEFT_STOP_DRAIN);
    return 0;
}

TEST(handle_after_exit)
{
    ASSERT_EQ(t_run_virtual(1, after_main, NULL), 0);
}

/* ---- weft_actor_run ---- */

typedef struct runner {
    weft_actor_opts o;
    weft_actor *a;
    int status;
    int self_ok;
} runner;

static void runner_started(void *ctx, weft_actor *a)
{
    runner *r = ctx;
    r->self_ok = weft_actor_self() == a;
    r->a = weft_actor_ref(a);
}

static int runner_fn(void *arg)
{
    runner *r = arg;
    r->status = weft__actor_run_with(&r->o, runner_started, r);
    return 0;
}

static int self_fn(void *st, weft_actor_msg *m)
{
    box *b = st;
    weft_actor *me = weft_actor_self();
    msg_t *x = m->data;
    if (m->kind == WEFT_MSG_ASK) {
        long r = b->n;
        /* An actor asking itself, or waiting for itself. */
        b->bad += weft_actor_ask(me, x, &r, WEFT_NEVER) != -EDEADLK;
        b->bad += weft_actor_join_until(me, NULL, WEFT_NEVER) != -EDEADLK;
        return weft_actor_reply(m, &r);
    }
    b->n++;
    return 0;
}

static int run_main(void *arg)
{
    (void)arg;
    box b = {0};
    runner r = {.o = box_opts(&b, 4)};
    r.o.fn = self_fn;
    weft_scope *s = scope_open();
    spawn(runner_fn, &r);
    settle();
    ASSERT(r.a != NULL);
    ASSERT(r.self_ok);
    ASSERT_EQ(tell_op(r.a, OP_INC, 0), 0);
    ASSERT_EQ(tell_op(r.a, OP_INC, 0), 0);
    long v = 0;
    ASSERT_EQ(ask_op(r.a, OP_GET, 0, &v, WEFT_NEVER), 0);
    ASSERT_EQ(v, 2);
    ASSERT_EQ(b.bad, 0);
    ASSERT_EQ(weft_actor_stop(r.a, WEFT_STOP_DRAIN), 0);
    scope_end(s);
    ASSERT_EQ(r.status, 0);
    ASSERT_EQ(b.stops, 1);
    ASSERT_EQ(weft_actor_unref(r.a), 0);
    ASSERT(weft_actor_self() == NULL);
    ASSERT_EQ(weft_actor_run(NULL), -EINVAL);
    return 0;
}

TEST(actor_run)
{
    ASSERT_EQ(t_run_virtual(1, run_main, NULL), 0);
}

/* ---- monitors ---- */

static int monitor_main(void *arg)
{
    (void)arg;
    box bw = {0}, bt = {0}, bt2 = {0};
    weft_actor *w = spawn_box(&bw, 2);
    weft_actor *t = spawn_box(&bt, 2);
    weft_actor *t2 = spawn_box(&bt2, 2);
    long id = weft_actor_monitor(t, w);
    ASSERT(id > 0);
    long id2 = weft_actor_monitor(t2, w);
    ASSERT(id2 > id);
    ASSERT_EQ(weft_actor_demonitor(t2, id2), 0);
    ASSERT_EQ(weft_actor_demonitor(t2, id2), -ENOENT);
    ASSERT_EQ(weft_actor_demonitor(t, id2), -ENOENT);
    settle();
    /* The watcher's mailbox full, the watcher stuck at its gate. */
    ASSERT_EQ(tell_op(w, OP_GATE, 0), 0);
    ASSERT_EQ(tell_op(w, OP_INC, 0), 0);
    ASSERT_EQ(tell_op(w, OP_INC, 0), 0);
    msg_t m = {.op = OP_INC};
    ASSERT_EQ(weft_actor_try_tell(w, &m), -EAGAIN);
    ASSERT_EQ(weft_actor_stop(t, WEFT_STOP_NOW), 0);
    ASSERT_EQ(weft_actor_stop(t2, WEFT_STOP_NOW), 0);
    int st = 0;
    ASSERT_EQ(weft_actor_join_until(t, &st, WEFT_NEVER), 0);
    ASSERT_EQ(st, -ECANCELED);
    ASSERT_EQ(weft_actor_join_until(t2, &st, WEFT_NEVER), 0);
    ASSERT_EQ(weft_actor_demonitor(t, id), -ENOENT); /* fired */
    ASSERT_EQ(weft_event_set(&bw.gate), 0);
    long r = 0;
    ASSERT_EQ(ask_op(w, OP_GET, 0, &r, WEFT_NEVER), 0);
    ASSERT_EQ(r, 2);
    /* The DOWN came before the queued messages, once, and only t's. */
    ASSERT_EQ(bw.downs, 1);
    ASSERT_EQ(bw.down_status, -ECANCELED);
    ASSERT_EQ(bw.down_id, id);
    ASSERT_EQ(bw.norder, 5);
    int want[5] = {OP_GATE, -1, OP_INC, OP_INC, OP_GET};
    for (int i = 0; i < 5; i++)
        ASSERT_EQ(bw.order[i], want[i]);
    /* A monitor of an exited actor fires at once. */
    long id3 = weft_actor_monitor(t, w);
    ASSERT(id3 > id2);
    ASSERT_EQ(ask_op(w, OP_GET, 0, &r, WEFT_NEVER), 0);
    ASSERT_EQ(bw.downs, 2);
    ASSERT_EQ(bw.down_id, id3);
    ASSERT_EQ(weft_actor_demonitor(t, id3), -ENOENT);

    /* Two DOWNs that fire while the watcher is busy both come, in the
     * order they fired, before the message queued ahead of them: the
     * loop looks for DOWNs again after handling one. */
    box b4 = {0}, b5 = {0};
    weft_actor *t4 = spawn_box(&b4, 2);
    weft_actor *t5 = spawn_box(&b5, 2);
    long id4 = weft_actor_monitor(t4, w);
    long id5 = weft_actor_monitor(t5, w);
    ASSERT(id4 > id3 && id5 > id4);
    ASSERT_EQ(weft_event_reset(&bw.gate), 0);
    ASSERT_EQ(tell_op(w, OP_GATE, 0), 0);
    ASSERT_EQ(tell_op(w, OP_INC, 0), 0);
    settle(); /* w holds at its gate, the INC queued */
    ASSERT_EQ(weft_actor_stop(t5, WEFT_STOP_NOW), 0);
    ASSERT_EQ(weft_actor_join_until(t5, NULL, WEFT_NEVER), 0);
    ASSERT_EQ(weft_actor_stop(t4, WEFT_STOP_DRAIN), 0);
    ASSERT_EQ(weft_actor_join_until(t4, NULL, WEFT_NEVER), 0);
    int before = bw.norder;
    ASSERT_EQ(weft_event_set(&bw.gate), 0);
    ASSERT_EQ(ask_op(w, OP_GET, 0, &r, WEFT_NEVER), 0);
    ASSERT_EQ(r, 3);
    ASSERT_EQ(bw.downs, 4);
    ASSERT_EQ(bw.down_id, id4); /* the later of the two */
    ASSERT_EQ(bw.down_status, 0);
    ASSERT_EQ(bw.norder, before + 4);
    ASSERT_EQ(bw.order[before], -1);
    ASSERT_EQ(bw.order[before + 1], -1);
    ASSERT_EQ(bw.order[before + 2], OP_INC);
    ASSERT_EQ(bw.order[before + 3], OP_GET);
    ASSERT_EQ(weft_actor_unref(t4), 0);
    ASSERT_EQ(weft_actor_unref(t5), 0);

    /* Futures: one made before the exit, one after. */
    box bf = {0};
    weft_scope *fs = collect_open();
    weft_actor *f_t = spawn_box_in(fs, &bf, 2);
    weft_future *f1, *f2;
    ASSERT_EQ(weft_actor_monitor_future(f_t, &f1), 0);
    ASSERT_EQ(weft_future_try_await(f1, &st), -EINPROGRESS);
    ASSERT_EQ(tell_op(f_t, OP_FAIL, -EPIPE), 0);
    st = 0;
    ASSERT_EQ(weft_future_await(f1, &st, WEFT_NEVER), 0);
    ASSERT_EQ(st, -EPIPE);
    ASSERT_EQ(weft_actor_monitor_future(f_t, &f2), 0);
    st = 0;
    ASSERT_EQ(weft_future_try_await(f2, &st), 0);
    ASSERT_EQ(st, -EPIPE);
    ASSERT_EQ(weft_future_unref(f1), 0);
    ASSERT_EQ(weft_future_unref(f2), 0);

    /* A watcher that has exited takes no monitor; a monitor left on an
     * actor whose watcher exits first is dropped when it fires. */
    box bx = {0}, by = {0};
    weft_actor *x = spawn_box(&bx, 2);
    weft_actor *y = spawn_box(&by, 2);
    ASSERT(weft_actor_monitor(y, x) > 0);
    ASSERT_EQ(weft_actor_stop(x, WEFT_STOP_DRAIN), 0);
    ASSERT_EQ(weft_actor_join_until(x, NULL, WEFT_NEVER), 0);
    ASSERT_EQ(weft_actor_monitor(y, x), -ESRCH);
    ASSERT_EQ(weft_actor_stop(y, WEFT_STOP_DRAIN), 0);
    ASSERT_EQ(weft_actor_join_until(y, NULL, WEFT_NEVER), 0);
    ASSERT_EQ(bx.downs, 0);

    /* A watcher that exits with DOWNs unhandled frees them. */
    box bz = {0}, bq = {0};
    weft_actor *z = spawn_box_in(fs, &bz, 2);
    weft_actor *q = spawn_box(&bq, 2);
    settle();
    ASSERT(weft_actor_monitor(q, z) > 0);
    ASSERT_EQ(tell_op(z, OP_GATE, -EIO), 0);
    ASSERT_EQ(weft_actor_stop(q, WEFT_STOP_NOW), 0);
    ASSERT_EQ(weft_actor_join_until(q, NULL, WEFT_NEVER), 0);
    ASSERT_EQ(weft_event_set(&bz.gate), 0);
    ASSERT_EQ(weft_actor_join_until(z, &st, WEFT_NEVER), 0);
    ASSERT_EQ(st, -EIO);
    ASSERT_EQ(bz.downs, 0);

    weft_actor *all[] = {w, t, t2, f_t, x, y, z, q};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) {
        weft_actor_stop(all[i], WEFT_STOP_NOW);
        ASSERT_EQ(weft_actor_join_until(all[i], NULL, WEFT_NEVER), 0);
        ASSERT_EQ(weft_actor_unref(all[i]), 0);
    }
    scope_end(fs);
    return 0;
}

TEST(monitors)
{
    ASSERT_EQ(t_run_virtual(1, monitor_main, NULL), 0);
}

/* ---- many monitors on one actor ---- */

/* A watcher that tallies its DOWNs by monitor id, to show that every
 * monitor either fired once or was removed, never both. The ids the test
 * made are first .. first + n - 1 (one task makes them in a row). */
typedef struct tally {
    long first, n;
    unsigned char *seen; /* DOWNs per id */
    long downs;
    long stray;    /* DOWNs of ids outside the range */
    long disorder; /* DOWNs not in the order the monitors were made */
    long last;     /* the last DOWN's id */
    int status;    /* the last DOWN's exit status */
} tally;

static int tally_fn(void *st, weft_actor_msg *m)
{
    tally *t = st;
    if (m->kind != WEFT_MSG_DOWN)
        return 0;
    t->downs++;
    t->status = m->down_status;
    long i = m->monitor - t->first;
    if (i < 0 || i >= t->n) {
        t->stray++;
        return 0;
    }
    t->seen[i]++;
    if (m->monitor <= t->last)
        t->disorder++;
    t->last = m->monitor;
    return 0;
}

static weft_actor *spawn_tally(tally *t, int worker)
{
    weft_actor_opts o = {.fn = tally_fn,
                         .state = t,
                         .msg_size = sizeof(long),
                         .capacity = 1,
                         .name = "tally",
                         .worker = worker};
    weft_actor *a = NULL;
    ASSERT_EQ(weft_actor_spawn(NULL, &o, &a), 0);
    return a;
}

/* n monitors of w on target, made in a row: the first id (the others
 * follow it one by one). */
static long monitor_many(weft_actor *target, weft_actor *w, long n)
{
    long first = weft_actor_monitor(target, w);
    ASSERT(first > 0);
    for (long i = 1; i < n; i++)
        ASSERT_EQ(weft_actor_monitor(target, w), first + i);
    return first;
}

/* Every 997th monitor is kept, to fire. */
#define KEPT(i) ((i) % 997 == 0)

static int demonitor_many_main(void *arg)
{
    (void)arg;
    long n = T_SCALE(100000);
    box bt = {0}, bo = {0};
    tally t = {.n = n, .seen = calloc((size_t)n, 1)};
    ASSERT(t.seen != NULL);
    weft_actor *target = spawn_box(&bt, 2);
    weft_actor *other = spawn_box(&bo, 2);
    weft_actor *w = spawn_tally(&t, 0);
    t.first = monitor_many(target, w, n);
    /* Removed in the order they were made, each at once (a search of the
     * target's list made this quadratic: minutes for 100,000). */
    long kept = 0;
    for (long i = 0; i < n; i++) {
        if (KEPT(i))
            kept++;
        else
            ASSERT_EQ(weft_actor_demonitor(target, t.first + i), 0);
    }
    for (long i = 0; i < n; i++)
        if (!KEPT(i))
            ASSERT_EQ(weft_actor_demonitor(target, t.first + i), -ENOENT);
    /* Each call looked at a record or two, not at the whole list (n * n / 2
     * records in all), and the table shrank with the count. */
    weft__lock_acquire(&target->lock);
    unsigned long probes = target->mons.probes;
    size_t count = target->mons.count, nbuckets = target->mons.nbuckets;
    weft__lock_release(&target->lock);
    ASSERT(probes <= 2 * (unsigned long)n);
    ASSERT_EQ(count, kept);
    ASSERT(nbuckets <= 16 * count + 8);
    /* An id of another actor's monitor, an id never made, bad ids. */
    long mo = weft_actor_monitor(other, w);
    ASSERT(mo > t.first + n - 1);
    ASSERT_EQ(weft_actor_demonitor(target, mo), -ENOENT);
    ASSERT_EQ(weft_actor_demonitor(other, t.first), -ENOENT);
    ASSERT_EQ(weft_actor_demonitor(other, mo), 0);
    ASSERT_EQ(weft_actor_demonitor(target, LONG_MAX), -ENOENT);
    ASSERT_EQ(weft_actor_demonitor(target, 0), -EINVAL);
    ASSERT_EQ(weft_actor_demonitor(target, -t.first), -EINVAL);
    ASSERT_EQ(weft_actor_demonitor(target, LONG_MIN), -EINVAL);
    ASSERT_EQ(weft_actor_demonitor(NULL, t.first), -EINVAL);
    /* The target exits: the kept monitors fire, once each and in the
     * order made; demonitoring them is now -ENOENT. */
    ASSERT_EQ(weft_actor_stop(target, WEFT_STOP_NOW), 0);
    ASSERT_EQ(weft_actor_join_until(target, NULL, WEFT_NEVER), 0);
    for (long i = 0; i < n; i += 997)
        ASSERT_EQ(weft_actor_demonitor(target, t.first + i), -ENOENT);
    end_actor(w, WEFT_STOP_DRAIN); /* handles the DOWNs first */
    ASSERT_EQ(t.downs, kept);
    ASSERT_EQ(t.stray, 0);
    ASSERT_EQ(t.disorder, 0);
    ASSERT_EQ(t.status, -ECANCELED);
    for (long i = 0; i < n; i++)
        ASSERT_EQ(t.seen[i], KEPT(i));
    ASSERT_EQ(weft_actor_unref(target), 0);
    end_actor(other, WEFT_STOP_NOW);
    free(t.seen);
    return 0;
}

TEST(demonitor_100k)
{
    ASSERT_EQ(t_run_virtual(1, demonitor_many_main, NULL), 0);
}

/* Demonitors racing the target's exit on another worker: every monitor
 * is either removed (demonitor returns 0, and no DOWN for it ever comes)
 * or fires once (demonitor returns -ENOENT), never both, never neither.
 * Part way (a seeded point), the demonitoring task has a task spinning on
 * the target's worker stop it, and the target exits there while the rest
 * are demonitored (a stop from the other worker would wake the target
 * later, often after the last demonitor). Where the exit lands among the
 * demonitors depends on the timing; that each monitor is removed or
 * fired, once, does not.
 *
 * Each round has both outcomes whatever the timing, so that a loaded
 * machine (the other worker off its CPU for the whole loop) still tests
 * the exit's take against demonitors: the stop is asked just after the
 * demonitor at the seeded point (which so returns 0), and the last
 * demonitor waits until the target has exited (so it finds its monitor
 * fired, -ENOENT). The demonitors between them meet the exit as it comes:
 * when both workers run, the exit lands amid them; the test counts those
 * rounds and prints the count, but does not require one, since only the
 * scheduler of the machine decides it. */
typedef struct race {
    weft_actor *target, *w;
    tally *t;
    unsigned char *removed;
    uint64_t seed;
    weft_event made;      /* the monitors are made */
    atomic_bool spinning; /* race_stop looks at stop */
    atomic_bool stop;     /* time to stop the target */
    int rc_at_stop;       /* the demonitor at the seeded point: 0 */
    int rc_last;          /* the last one, after the exit: -ENOENT */
    bool amid; /* the exit came before the last demonitor had to wait */
} race;

/* On the target's worker: stops it when told to. */
static int race_stop(void *arg)
{
    race *r = arg;
    ASSERT_EQ(weft_event_wait(&r->made), 0);
    atomic_store(&r->spinning, true);
    while (!atomic_load(&r->stop))
        ; /* not weft_yield: a yielding worker may look back late */
    return weft_actor_stop(r->target, WEFT_STOP_NOW);
}

static int race_demonitor(void *arg)
{
    race *r = arg;
    long n = r->t->n;
    r->t->first = monitor_many(r->target, r->w, n);
    ASSERT_EQ(weft_event_set(&r->made), 0);
    while (!atomic_load(&r->spinning))
        ;
    long stop_at = n / 8 + (long)(r->seed % (uint64_t)(n / 2));
    bool forward = r->seed % 2; /* in the order made, or the reverse */
    for (long k = 0; k < n; k++) {
        if (k == n - 1) { /* the last waits for the exit */
            r->amid = weft_actor_join_until(r->target, NULL, 0) == 0;
            ASSERT_EQ(weft_actor_join(r->target, NULL), 0);
        }
        long i = forward ? k : n - 1 - k;
        int rc = weft_actor_demonitor(r->target, r->t->first + i);
        ASSERT(rc == 0 || rc == -ENOENT);
        r->removed[i] = rc == 0;
        if (k == stop_at) {
            r->rc_at_stop = rc;
            atomic_store(&r->stop, true);
        }
        if (k == n - 1)
            r->rc_last = rc;
    }
    return 0;
}

static int demonitor_race_main(void *arg)
{
    (void)arg;
    long n = 10000, rounds = 20, amid = 0;
    uint64_t seed = T_SEED(0x6d6f6e69);
    for (long round = 0; round < rounds; round++) {
        box bt = {0};
        tally t = {.n = n, .seen = calloc((size_t)n, 1)};
        race r = {.t = &t, .removed = calloc((size_t)n, 1), .seed = rnd(&seed)};
        ASSERT(t.seen && r.removed);
        weft_actor_opts o = box_opts(&bt, 2);
        o.worker = 1; /* the target on worker 0, the rest on worker 1 */
        ASSERT_EQ(weft_actor_spawn(NULL, &o, &r.target), 0);
        r.w = spawn_tally(&t, 2);
        ASSERT_EQ(ask_op(r.target, OP_GET, 0, NULL, WEFT_NEVER), 0); /* up */
        weft_scope *s = scope_open();
        spawn_on(0, race_stop, &r);
        spawn_on(1, race_demonitor, &r);
        scope_end(s);
        ASSERT_EQ(weft_actor_join_until(r.target, NULL, WEFT_NEVER), 0);
        end_actor(r.w, WEFT_STOP_DRAIN);
        long removed = 0;
        for (long i = 0; i < n; i++) {
            ASSERT_EQ(r.removed[i] + t.seen[i], 1);
            removed += r.removed[i];
        }
        ASSERT_EQ(t.downs + removed, n);
        ASSERT_EQ(t.stray, 0);
        ASSERT_EQ(t.disorder, 0);
        /* Both outcomes, in every round (see above). */
        ASSERT_EQ(r.rc_at_stop, 0);
        ASSERT_EQ(r.rc_last, -ENOENT);
        amid += r.amid;
        ASSERT_EQ(weft_actor_unref(r.target), 0);
        free(t.seen);
        free(r.removed);
    }
    fprintf(stderr,
            "demonitor_races_exit: the exit came amid the demonitors "
            "in %ld of %ld rounds\n",
            amid, rounds);
    return 0;
}

TEST(demonitor_races_exit)
{
    ASSERT_EQ(t_run_mono(2, demonitor_race_main, NULL), 0);
}

/* ---- what a supervisor's restart of an actor keeps ---- */

/* The actor's state memory (opts.state) is kept as the failed life left
 * it, and on_start runs again; the registered name moves to the new
 * actor, and a name registered by hand is gone; the mailbox, the old
 * handle and the monitors on the old actor are not carried over. */
static int restart_keeps_main(void *arg)
{
    (void)arg;
    box b = {0}, bw = {0};
    weft_actor_opts o = box_opts(&b, 4);
    o.register_as = "kept";
    weft_child_spec spec = {.name = "kept",
                            .actor = &o,
                            .restart = WEFT_PERMANENT,
                            .shutdown_ns = WEFT_SEC};
    weft_sup_opts so = {
        .strategy = WEFT_ONE_FOR_ONE, .intensity = 5, .period_ns = WEFT_SEC};
    weft_sup *sup;
    ASSERT_EQ(weft_sup_spawn(NULL, &so, &spec, 1, &sup), 0);
    weft_actor *w = spawn_box(&bw, 2);
    settle();
    weft_actor *a1 = weft_whereis("kept");
    ASSERT(a1 != NULL);
    ASSERT_EQ(weft_register("extra", a1), 0);
    long id = weft_actor_monitor(a1, w);
    ASSERT(id > 0);
    ASSERT_EQ(tell_op(a1, OP_INC, 0), 0);
    ASSERT_EQ(tell_op(a1, OP_INC, 0), 0);
    long v = 0;
    ASSERT_EQ(ask_op(a1, OP_GET, 0, &v, WEFT_NEVER), 0);
    ASSERT_EQ(v, 2);
    /* Held at the gate with a failure and two increments queued behind. */
    ASSERT_EQ(tell_op(a1, OP_GATE, 0), 0);
    ASSERT_EQ(tell_op(a1, OP_FAIL, -EIO), 0);
    ASSERT_EQ(tell_op(a1, OP_INC, 0), 0);
    ASSERT_EQ(tell_op(a1, OP_INC, 0), 0);
    ASSERT_EQ(weft_event_set(&b.gate), 0);
    int st = 0;
    ASSERT_EQ(weft_actor_join_until(a1, &st, WEFT_NEVER), 0);
    ASSERT_EQ(st, -EIO);
    weft_actor *a2;
    while ((a2 = weft_whereis("kept")) == NULL || a2 == a1) {
        if (a2)
            ASSERT_EQ(weft_actor_unref(a2), 0);
        settle();
    }
    ASSERT_EQ(b.starts, 2); /* on_start again, on the same state */
    ASSERT_EQ(b.stops, 1);
    ASSERT_EQ(b.stop_status, -EIO);
    /* The state as the first life left it: the increments queued behind
     * the failure were dropped with its mailbox, not handled. */
    ASSERT_EQ(ask_op(a2, OP_GET, 0, &v, WEFT_NEVER), 0);
    ASSERT_EQ(v, 2);
    ASSERT_EQ(weft_actor_queued(a2), 0);
    ASSERT(weft_whereis("extra") == NULL);
    /* The old handle refuses; its monitor fired once, at its exit. */
    ASSERT_EQ(tell_op(a1, OP_INC, 0), -ESRCH);
    ASSERT_EQ(weft_actor_demonitor(a1, id), -ENOENT);
    ASSERT_EQ(ask_op(w, OP_GET, 0, NULL, WEFT_NEVER), 0);
    ASSERT_EQ(bw.downs, 1);
    ASSERT_EQ(bw.down_id, id);
    ASSERT_EQ(bw.down_status, -EIO);
    /* Nothing watches the new life: its exit tells w nothing. */
    ASSERT_EQ(weft_sup_stop(sup), 0);
    ASSERT_EQ(weft_sup_join_until(sup, &st, WEFT_NEVER), 0);
    ASSERT_EQ(st, 0);
    ASSERT_EQ(weft_sup_free(sup), 0);
    ASSERT_EQ(weft_actor_join_until(a2, &st, WEFT_NEVER), 0);
    ASSERT_EQ(st, 0);
    ASSERT_EQ(ask_op(w, OP_GET, 0, NULL, WEFT_NEVER), 0);
    ASSERT_EQ(bw.downs, 1);
    ASSERT(weft_whereis("kept") == NULL);
    ASSERT_EQ(weft_actor_unref(a1), 0);
    ASSERT_EQ(weft_actor_unref(a2), 0);
    end_actor(w, WEFT_STOP_NOW);
    return 0;
}

TEST(restart_keeps_state_not_mailbox)
{
    ASSERT_EQ(t_run_virtual(1, restart_keeps_main, NULL), 0);
}

/* ---- the registry ---- */

static int registry_main(void *arg)
{
    (void)arg;
    box b1 = {0}, b2 = {0}, b3 = {0};
    weft_actor_opts o = box_opts(&b1, 2);
    o.register_as = "svc";
    weft_actor *a1;
    ASSERT_EQ(weft_actor_spawn(NULL, &o, &a1), 0);
    weft_actor *f = weft_whereis("svc"); /* there when spawn returns */
    ASSERT(f == a1);
    ASSERT_EQ(weft_actor_unref(f), 0);
    /* A second actor wanting the name fails at its start. */
    o = box_opts(&b2, 2);
    o.register_as = "svc";
    weft_actor *a2;
    weft_scope *fs = collect_open();
    ASSERT_EQ(weft_actor_spawn(fs, &o, &a2), 0);
    int st = 0;
    ASSERT_EQ(weft_actor_join_until(a2, &st, WEFT_NEVER), 0);
    ASSERT_EQ(st, -EEXIST);
    ASSERT_EQ(b2.starts, 0);
    scope_end(fs);
    weft_actor *a3 = spawn_box(&b3, 2);
    ASSERT_EQ(weft_register("svc", a3), -EEXIST);
    ASSERT_EQ(weft_register("other", a3), 0);
    ASSERT_EQ(weft_register("other2", a3), 0);
    ASSERT_EQ(weft_register("x", a2), -ESRCH); /* exited */
    ASSERT_EQ(weft_register("", a3), -EINVAL);
    char longname[65];
    memset(longname, 'n', 64);
    longname[64] = '\0';
    ASSERT_EQ(weft_register(longname, a3), -EINVAL);
    ASSERT(weft_whereis(longname) == NULL);
    longname[63] = '\0';
    ASSERT_EQ(weft_register(longname, a3), 0);
    ASSERT_EQ(weft_register(NULL, a3), -EINVAL);
    ASSERT_EQ(weft_register("y", NULL), -EINVAL);
    ASSERT_EQ(weft_unregister("other2"), 0);
    ASSERT_EQ(weft_unregister("other2"), -ENOENT);
    ASSERT(weft_whereis("other2") == NULL);
    /* Many names: the table grows. */
    for (int i = 0; i < 300; i++) {
        char n[16];
        snprintf(n, sizeof n, "n%d", i);
        ASSERT_EQ(weft_register(n, i % 2 ? a1 : a3), 0);
    }
    for (int i = 0; i < 300; i += 7) {
        char n[16];
        snprintf(n, sizeof n, "n%d", i);
        weft_actor *g = weft_whereis(n);
        ASSERT(g == (i % 2 ? a1 : a3));
        weft_actor_unref(g);
    }
    /* The exit frees a1's names: another may take them. */
    ASSERT_EQ(tell_op(a1, OP_STOP, 0), 0);
    ASSERT_EQ(weft_actor_join_until(a1, NULL, WEFT_NEVER), 0);
    ASSERT(weft_whereis("svc") == NULL);
    ASSERT(weft_whereis("n1") == NULL);
    ASSERT_EQ(weft_register("svc", a3), 0);
    ASSERT_EQ(weft_register("n1", a3), 0);
    f = weft_whereis("svc");
    ASSERT(f == a3);
    weft_actor_unref(f);
    ASSERT_EQ(weft_actor_stop(a3, WEFT_STOP_NOW), 0);
    ASSERT_EQ(weft_actor_join_until(a3, NULL, WEFT_NEVER), 0);
    ASSERT(weft_whereis("svc") == NULL);
    ASSERT(weft_whereis("n0") == NULL);
    ASSERT_EQ(weft_unregister("svc"), -ENOENT);
    weft_actor_unref(a1);
    weft_actor_unref(a2);
    /* a4 still runs, named, when this task returns: the cancel of its
     * scope stops it, and its exit frees the name. */
    static box b4; /* outlives this task */
    weft_actor *a4 = spawn_box(&b4, 2);
    ASSERT_EQ(weft_register("left", a4), 0);
    weft_actor_unref(a3);
    weft_actor_unref(a4);
    return 0;
}

static int registry_root(void *arg)
{
    weft_scope *s = scope_open();
    ASSERT(weft_spawn(s, registry_main, arg) >= 0);
    settle();
    ASSERT_EQ(weft_scope_cancel(s), 0);
    weft_scope_join(s);
    weft_scope_free(s);
    return 0;
}

TEST(registry)
{
    ASSERT_EQ(t_run_virtual(1, registry_root, NULL), 0);
    /* A second runtime has a registry of its own. */
    ASSERT_EQ(t_run_virtual(2, registry_root, NULL), 0);
    ASSERT_EQ(weft_register("svc", NULL), -EINVAL);
    ASSERT(weft_whereis("svc") == NULL);
    ASSERT_EQ(weft_unregister("svc"), -EPERM);
}

/* ---- many tells across two workers ---- */

typedef struct sender {
    weft_actor *a;
    int from;
    long n;
    bool try_first;
} sender;

static int sender_fn(void *arg)
{
    sender *s = arg;
    for (long i = 0; i < s->n; i++) {
        msg_t m = {.op = OP_SEQ, .from = s->from, .v = i};
        if (s->try_first && weft_actor_try_tell(s->a, &m) == 0)
            continue;
        ASSERT_EQ(weft_actor_tell(s->a, &m, WEFT_NEVER), 0);
    }
    return 0;
}

static int stress_main(void *arg)
{
    (void)arg;
    long total = T_SCALE(1000000);
    box b = {0};
    weft_actor_opts o = box_opts(&b, 64);
    o.worker = 1; /* on worker 0; the senders on both */
    weft_actor *a;
    ASSERT_EQ(weft_actor_spawn(NULL, &o, &a), 0);
    sender s[NSEND];
    long per = total / NSEND;
    weft_scope *sc = scope_open();
    for (int i = 0; i < NSEND; i++) {
        s[i] = (sender){.a = a, .from = i, .n = per, .try_first = i % 3 == 0};
        spawn_on(i, sender_fn, &s[i]);
    }
    scope_end(sc);
    long r = 0;
    ASSERT_EQ(ask_op(a, OP_GET, 0, &r, WEFT_NEVER), 0);
    ASSERT_EQ(r, per * NSEND);
    ASSERT_EQ(b.bad, 0);
    for (int i = 0; i < NSEND; i++)
        ASSERT_EQ(b.seq[i], per);
    ASSERT_EQ(weft_actor_stop(a, WEFT_STOP_DRAIN), 0);
    ASSERT_EQ(weft_actor_join_until(a, NULL, WEFT_NEVER), 0);
    ASSERT_EQ(weft_actor_unref(a), 0);
    return 0;
}

TEST(million_tells_two_workers)
{
    ASSERT_EQ(t_run_mono(2, stress_main, NULL), 0);
}

/* Asks from both workers to actors on both workers, with deadlines some
 * of which pass: every ask ends once, the counts add up. */
typedef struct pinger {
    weft_actor **as;
    int nas;
    long n, ok, timed;
    uint64_t seed;
} pinger;

static int pinger_fn(void *arg)
{
    pinger *p = arg;
    for (long i = 0; i < p->n; i++) {
        weft_actor *a = p->as[rnd(&p->seed) % (uint64_t)p->nas];
        long r = -1;
        weft_time dl = i % 4 ? WEFT_NEVER : weft_now() + 2000;
        int rc = ask_op(a, OP_INC, 0, &r, dl);
        if (rc == 0) {
            ASSERT(r > 0);
            p->ok++;
        } else {
            ASSERT_EQ(rc, -ETIMEDOUT);
            p->timed++;
        }
    }
    return 0;
}

static int asks_main(void *arg)
{
    (void)arg;
    enum { NA = 4, NP = 6 };
    box b[NA] = {{0}};
    weft_actor *as[NA];
    for (int i = 0; i < NA; i++) {
        weft_actor_opts o = box_opts(&b[i], 2);
        o.worker = i % 2 + 1;
        ASSERT_EQ(weft_actor_spawn(NULL, &o, &as[i]), 0);
    }
    pinger p[NP];
    weft_scope *sc = scope_open();
    for (int i = 0; i < NP; i++) {
        p[i] = (pinger){.as = as, .nas = NA, .n = T_SCALE(20000), .seed = i};
        spawn_on(i, pinger_fn, &p[i]);
    }
    scope_end(sc);
    long ok = 0, handled = 0;
    for (int i = 0; i < NP; i++) {
        ASSERT_EQ(p[i].ok + p[i].timed, p[i].n);
        ok += p[i].ok;
    }
    for (int i = 0; i < NA; i++) {
        ASSERT_EQ(weft_actor_stop(as[i], WEFT_STOP_DRAIN), 0);
        ASSERT_EQ(weft_actor_join_until(as[i], NULL, WEFT_NEVER), 0);
        handled += b[i].n;
        ASSERT_EQ(weft_actor_unref(as[i]), 0);
    }
    /* A timed-out ask may still have been handled; a replied one was. */
    ASSERT(handled >= ok);
    return 0;
}

TEST(asks_two_workers)
{
    ASSERT_EQ(t_run_mono(2, asks_main, NULL), 0);
}

/* ---- misuse ---- */

typedef struct foreign {
    weft_actor *a;
    int tell_rc, try_rc, ask_rc, run_rc, spawn_rc, wait_rc;
} foreign;

static void *foreign_thread(void *arg)
{
    foreign *f = arg;
    msg_t m = {.op = OP_INC};
    f->tell_rc = weft_actor_tell(f->a, &m, WEFT_NEVER);
    f->try_rc = weft_actor_try_tell(f->a, &m);
    f->ask_rc = weft_actor_ask(f->a, &m, NULL, WEFT_NEVER);
    f->wait_rc = weft_actor_join_until(f->a, NULL, WEFT_NEVER);
    box b = {0};
    weft_actor_opts o = box_opts(&b, 1);
    f->run_rc = weft_actor_run(&o);
    weft_actor *x;
    f->spawn_rc = weft_actor_spawn(NULL, &o, &x);
    return NULL;
}

static int misuse_main(void *arg)
{
    (void)arg;
    box b = {0};
    weft_actor *a;
    weft_actor_opts o = box_opts(&b, 2);
    ASSERT_EQ(weft_actor_spawn(NULL, NULL, &a), -EINVAL);
    ASSERT_EQ(weft_actor_spawn(NULL, &o, NULL), -EINVAL);
    weft_actor_opts bad = o;
    bad.fn = NULL;
    ASSERT_EQ(weft_actor_spawn(NULL, &bad, &a), -EINVAL);
    bad = o;
    bad.msg_size = 0;
    ASSERT_EQ(weft_actor_spawn(NULL, &bad, &a), -EINVAL);
    bad.msg_size = 65537;
    ASSERT_EQ(weft_actor_spawn(NULL, &bad, &a), -EINVAL);
    bad = o;
    bad.reply_size = 65537;
    ASSERT_EQ(weft_actor_spawn(NULL, &bad, &a), -EINVAL);
    bad = o;
    bad.capacity = 0;
    ASSERT_EQ(weft_actor_spawn(NULL, &bad, &a), -EINVAL);
    bad = o;
    bad.worker = 99;
    ASSERT_EQ(weft_actor_spawn(NULL, &bad, &a), -EINVAL);
    bad = o;
    bad.register_as = "";
    ASSERT_EQ(weft_actor_spawn(NULL, &bad, &a), -EINVAL);
    ASSERT_EQ(weft_actor_run(&bad), -EINVAL);
    bad = o;
    bad.msg_size = 65536;
    bad.capacity = 3;
    ASSERT_EQ(weft_actor_spawn(NULL, &bad, &a), 0); /* the largest */
    end_actor(a, WEFT_STOP_NOW);

    a = spawn_box(&b, 2);
    msg_t m = {.op = OP_INC};
    ASSERT_EQ(weft_actor_tell(NULL, &m, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_actor_tell(a, NULL, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_actor_try_tell(NULL, &m), -EINVAL);
    ASSERT_EQ(weft_actor_ask(NULL, &m, NULL, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_actor_ask(a, NULL, NULL, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_actor_stop(NULL, WEFT_STOP_NOW), -EINVAL);
    ASSERT_EQ(weft_actor_stop(a, 7), -EINVAL);
    ASSERT_EQ(weft_actor_join_until(NULL, NULL, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_actor_unref(NULL), -EINVAL);
    ASSERT(weft_actor_ref(NULL) == NULL);
    ASSERT_EQ(weft_actor_queued(NULL), 0);
    ASSERT_EQ(weft_actor_monitor(NULL, a), -EINVAL);
    ASSERT_EQ(weft_actor_monitor(a, NULL), -EINVAL);
    ASSERT_EQ(weft_actor_demonitor(a, 0), -EINVAL);
    ASSERT_EQ(weft_actor_demonitor(NULL, 1), -EINVAL);
    ASSERT_EQ(weft_actor_monitor_future(a, NULL), -EINVAL);
    weft_actor_msg fake = {.kind = WEFT_MSG_ASK};
    long r = 0;
    ASSERT_EQ(weft_actor_reply(&fake, &r), -EINVAL);
    ASSERT_EQ(weft_actor_reply(NULL, &r), -EINVAL);
    ASSERT_EQ(weft_actor_reply_error(&fake, 0), -EINVAL);

    /* A foreign thread: try_tell works, the blocking calls say -EPERM. */
    foreign f = {.a = a};
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, foreign_thread, &f), 0);
    ASSERT_EQ(pthread_join(th, NULL), 0);
    ASSERT_EQ(f.tell_rc, -EPERM);
    ASSERT_EQ(f.try_rc, 0);
    ASSERT_EQ(f.ask_rc, -EPERM);
    ASSERT_EQ(f.wait_rc, -EPERM);
    ASSERT_EQ(f.run_rc, -EPERM);
    ASSERT_EQ(f.spawn_rc, -EPERM);
    ASSERT_EQ(ask_op(a, OP_GET, 0, &r, WEFT_NEVER), 0);
    ASSERT_EQ(r, 1);
    /* Calls in a cancelled scope. */
    weft_scope *s = scope_open();
    ASSERT_EQ(weft_scope_cancel(s), 0);
    ASSERT_EQ(weft_actor_tell(a, &m, WEFT_NEVER), -ECANCELED);
    ASSERT_EQ(weft_actor_ask(a, &m, &r, WEFT_NEVER), -ECANCELED);
    ASSERT_EQ(weft_actor_try_tell(a, &m), 0); /* not a checkpoint */
    weft_actor *none = a;
    ASSERT_EQ(weft_actor_spawn(NULL, &o, &none), -ECANCELED);
    ASSERT(none == NULL);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(ask_op(a, OP_GET, 0, &r, WEFT_NEVER), 0);
    ASSERT_EQ(r, 2);
    end_actor(a, WEFT_STOP_NOW);
    return 0;
}

TEST(misuse)
{
    ASSERT_EQ(t_run_virtual(1, misuse_main, NULL), 0);
    /* Outside any runtime. */
    box b = {0};
    weft_actor_opts o = box_opts(&b, 1);
    weft_actor *a;
    ASSERT_EQ(weft_actor_spawn(NULL, &o, &a), -EPERM);
    ASSERT_EQ(weft_actor_run(&o), -EPERM);
    ASSERT(weft_actor_self() == NULL);
}
