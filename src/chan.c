/* SPDX-License-Identifier: MIT */
/*
 * Channels and select.
 *
 * A channel is a ring buffer of `cap` values and two wait queues, senders
 * and receivers, all under one spinlock (as Go's hchan). The rule that
 * keeps every value exactly once: a value moves only under the channel's
 * lock, and it moves into or out of a waiting task only after the mover
 * has claimed that task's park (weft__wake_claim). A waiter whose claim
 * fails was already woken by something else (its deadline, a cancel, or,
 * in a select, another case) and is skipped; it takes itself off the queue
 * when it runs. So a send that returns an error delivered nothing, and a
 * receive that returns an error took nothing.
 *
 * Direct hand-off: a sender that finds a receiver waiting copies its value
 * straight into the receiver's buffer and wakes it (no trip through the
 * ring), and a receiver that finds a sender waiting on a rendezvous
 * channel copies straight out of it. On a full buffered channel, a
 * receiver takes the oldest value and moves the first waiting sender's
 * value to the back of the ring, which keeps each sender's values in
 * order.
 *
 * select locks every channel of its cases in address order (so two selects
 * over the same channels cannot deadlock), looks at the cases in a random
 * order and performs the first ready one; if none is ready it queues one
 * waiter per case, all carrying the same park token, and parks. The first
 * waker to claim that token wins and records its case; when the task runs
 * again it locks the channels once more and takes its other waiters off.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#define CHAN_MAGIC 0x6368616eu /* "chan" */
#define CHAN_DEAD 0x64656164u  /* "dead": freed (weft__husk_free) */
#define MAX_ELEM 65536
#define SELECT_STACK_CASES 8

struct weft_chan {
    uint32_t magic;     /* CHAN_MAGIC while alive */
    weft__lock lock;    /* guards everything below */
    atomic_long refs;   /* references; the last unref frees */
    size_t elem;        /* bytes per value */
    size_t cap;         /* ring slots; 0: rendezvous */
    size_t len, head;   /* values in the ring, index of the oldest */
    bool closed;        /* set once by weft_chan_close */
    weft__waitq sendq;  /* senders waiting: elem = their value */
    weft__waitq recvq;  /* receivers waiting: elem = their buffer */
    unsigned char *buf; /* cap * elem bytes */
};

static bool chan_ok(const weft_chan *c)
{
    return c && c->magic == CHAN_MAGIC;
}

size_t weft__chan_elem(const weft_chan *c)
{
    return chan_ok(c) ? c->elem : 0;
}

int weft_chan_new(weft_chan **out, size_t elem_size, size_t capacity)
{
    if (!out || elem_size == 0 || elem_size > MAX_ELEM)
        return -EINVAL;
    if (capacity > SIZE_MAX / elem_size / 2)
        return -EINVAL;
    weft_chan *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    if (capacity) {
        c->buf = malloc(capacity * elem_size);
        if (!c->buf) {
            free(c);
            return -ENOMEM;
        }
    }
    c->magic = CHAN_MAGIC;
    c->elem = elem_size;
    c->cap = capacity;
    atomic_init(&c->refs, 1);
    *out = c;
    return 0;
}

weft_chan *weft_chan_ref(weft_chan *c)
{
    if (chan_ok(c))
        add_rlx(&c->refs, 1);
    return c;
}

int weft_chan_unref(weft_chan *c)
{
    if (!chan_ok(c))
        return -EINVAL;
    if (add_acq_rel(&c->refs, -1) != 1)
        return 0;
    free(c->buf);
    c->buf = NULL;
    c->magic = CHAN_DEAD;
    weft__husk_free(c);
    return 0;
}

size_t weft_chan_len(const weft_chan *c)
{
    if (!chan_ok(c))
        return 0;
    weft__lock_acquire((weft__lock *)&c->lock);
    size_t n = c->len;
    weft__lock_release((weft__lock *)&c->lock);
    return n;
}

size_t weft_chan_cap(const weft_chan *c)
{
    return chan_ok(c) ? c->cap : 0;
}

/* ---- moves, under the channel's lock ---- */

static unsigned char *slot(weft_chan *c, size_t i)
{
    size_t k = c->head + i; /* head < cap and i <= cap: one wrap at most */
    return c->buf + (k >= c->cap ? k - c->cap : k) * c->elem;
}

/* Sends if no waiting is needed. Returns 0 (sent), -EPIPE or -EAGAIN;
 * *woken is a claimed receiver to finish after unlocking. */
static int send_locked(weft_chan *c, const void *elem, weft__waiter **woken)
{
    if (c->closed)
        return -EPIPE;
    weft__waiter *w = weft__waitq_claim(&c->recvq);
    if (w) {
        memcpy(w->elem, elem, c->elem);
        *woken = w;
        return 0;
    }
    if (c->len < c->cap) {
        memcpy(slot(c, c->len), elem, c->elem);
        c->len++;
        return 0;
    }
    return -EAGAIN;
}

/* Receives if no waiting is needed. Returns 0, -EPIPE (closed and drained)
 * or -EAGAIN; *woken is a claimed sender to finish after unlocking. */
static int recv_locked(weft_chan *c, void *out, weft__waiter **woken)
{
    if (c->len > 0) {
        memcpy(out, slot(c, 0), c->elem);
        c->head = c->head + 1 == c->cap ? 0 : c->head + 1;
        c->len--;
        weft__waiter *w = weft__waitq_claim(&c->sendq);
        if (w) { /* the ring had been full: the sender's value joins it */
            memcpy(slot(c, c->len), w->elem, c->elem);
            c->len++;
            *woken = w;
        }
        return 0;
    }
    weft__waiter *w = weft__waitq_claim(&c->sendq);
    if (w) { /* rendezvous: straight from the sender */
        memcpy(out, w->elem, c->elem);
        *woken = w;
        return 0;
    }
    return c->closed ? -EPIPE : -EAGAIN;
}

/* Either move, by the case's direction. */
static int op_locked(weft_chan *c, weft_op op, void *elem, weft__waiter **woken)
{
    return op == WEFT_OP_SEND ? send_locked(c, elem, woken)
                              : recv_locked(c, elem, woken);
}

/* Where a task waiting to do op on c queues. */
static weft__waitq *queue_of(weft_chan *c, weft_op op)
{
    return op == WEFT_OP_SEND ? &c->sendq : &c->recvq;
}

static void finish(weft__waiter *w, int code)
{
    if (w)
        weft__wake_finish(w->task, code);
}

/* ---- send and receive ---- */

/* A send (elem is the value) or a receive (elem is the buffer); waits
 * unless wait is false, when it returns -EAGAIN instead. */
static int chan_op(weft_chan *c, weft_op op, void *elem, int64_t deadline,
                   bool wait)
{
    if (!chan_ok(c) || !elem)
        return -EINVAL;
    int rc = wait ? weft__checkpoint() : 0;
    if (rc)
        return rc;
    weft__waiter *woken = NULL;
    weft__lock_acquire(&c->lock);
    rc = op_locked(c, op, elem, &woken);
    if (rc != -EAGAIN || !wait) {
        weft__lock_release(&c->lock);
        finish(woken, 0);
        return rc;
    }
    weft__waiter self = {.elem = elem};
    return weft__wait_one(&c->lock, queue_of(c, op), &self,
                          op == WEFT_OP_SEND ? WEFT__W_SEND : WEFT__W_RECV, c,
                          deadline);
}

int weft_chan_send(weft_chan *c, const void *elem)
{
    return chan_op(c, WEFT_OP_SEND, (void *)elem, WEFT_NEVER, true);
}

int weft_chan_send_until(weft_chan *c, const void *elem, weft_time deadline)
{
    return chan_op(c, WEFT_OP_SEND, (void *)elem, deadline, true);
}

int weft_chan_try_send(weft_chan *c, const void *elem)
{
    return chan_op(c, WEFT_OP_SEND, (void *)elem, WEFT_NEVER, false);
}

int weft_chan_recv(weft_chan *c, void *out)
{
    return chan_op(c, WEFT_OP_RECV, out, WEFT_NEVER, true);
}

int weft_chan_recv_until(weft_chan *c, void *out, weft_time deadline)
{
    return chan_op(c, WEFT_OP_RECV, out, deadline, true);
}

int weft_chan_try_recv(weft_chan *c, void *out)
{
    return chan_op(c, WEFT_OP_RECV, out, WEFT_NEVER, false);
}

int weft_chan_close(weft_chan *c)
{
    if (!chan_ok(c))
        return -EINVAL;
    weft__waiter *wake = NULL, *w;
    weft__lock_acquire(&c->lock);
    if (c->closed) {
        weft__lock_release(&c->lock);
        return -EPIPE;
    }
    c->closed = true;
    /* Every waiter leaves with -EPIPE: senders keep their values. The
     * claimed ones are chained through `next` (they are off the queues). */
    while ((w = weft__waitq_claim(&c->recvq)) ||
           (w = weft__waitq_claim(&c->sendq))) {
        w->next = wake;
        wake = w;
    }
    weft__lock_release(&c->lock);
    while (wake) {
        w = wake;
        wake = w->next;
        finish(w, -EPIPE);
    }
    return 0;
}

/* ---- select ---- */

/* The distinct channels of the cases, sorted by address: the lock order. */
static int lock_order(weft_case *cases, int n, weft_chan **order)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        weft_chan *c = cases[i].chan;
        if (!c)
            continue;
        int j = k;
        while (j > 0 && order[j - 1] > c)
            j--;
        if (j > 0 && order[j - 1] == c)
            continue; /* already there */
        memmove(order + j + 1, order + j, (size_t)(k - j) * sizeof(*order));
        order[j] = c;
        k++;
    }
    return k;
}

static void lock_all(weft_chan **order, int k)
{
    for (int i = 0; i < k; i++)
        weft__lock_acquire(&order[i]->lock);
}

static void unlock_all(weft_chan **order, int k)
{
    for (int i = k - 1; i >= 0; i--)
        weft__lock_release(&order[i]->lock);
}

static int check_cases(weft_case *cases, int n)
{
    if (n < 0 || (n > 0 && !cases))
        return -EINVAL;
    for (int i = 0; i < n; i++) {
        if (!cases[i].chan)
            continue;
        if (!chan_ok(cases[i].chan) || !cases[i].elem ||
            (cases[i].op != WEFT_OP_SEND && cases[i].op != WEFT_OP_RECV))
            return -EINVAL;
    }
    return 0;
}

/* Tries the cases in a random order; returns the index of the one done
 * (its rc set), or -EAGAIN. */
static int select_ready(weft_case *cases, int n, int *perm,
                        weft__waiter **woken)
{
    for (int i = 0; i < n; i++) { /* Fisher-Yates */
        int j = (int)(weft__rand() % (uint64_t)(i + 1));
        perm[i] = perm[j];
        perm[j] = i;
    }
    for (int k = 0; k < n; k++) {
        weft_case *cs = &cases[perm[k]];
        if (!cs->chan)
            continue;
        int rc = op_locked(cs->chan, cs->op, cs->elem, woken);
        if (rc != -EAGAIN) {
            cs->rc = rc;
            return perm[k];
        }
    }
    return -EAGAIN;
}

static int select_impl(weft_case *cases, int n, int64_t deadline, bool wait)
{
    int rc = check_cases(cases, n);
    if (rc)
        return rc;
    if (wait && (rc = weft__checkpoint()) != 0)
        return rc;
    weft_chan *order_small[SELECT_STACK_CASES];
    int perm_small[SELECT_STACK_CASES];
    weft__waiter ws_small[SELECT_STACK_CASES];
    weft_chan **order = order_small;
    int *perm = perm_small;
    weft__waiter *ws = ws_small;
    if (n > SELECT_STACK_CASES) {
        order = malloc((size_t)n * sizeof(*order));
        perm = malloc((size_t)n * sizeof(*perm));
        ws = calloc((size_t)n, sizeof(*ws));
        if (!order || !perm || !ws) {
            rc = -ENOMEM;
            goto out;
        }
    }
    int k = lock_order(cases, n, order);
    weft__waiter *woken = NULL;
    lock_all(order, k);
    rc = select_ready(cases, n, perm, &woken);
    if (rc != -EAGAIN || !wait) {
        unlock_all(order, k);
        finish(woken, 0);
        goto out;
    }
    /* Nothing ready: a waiter on every case, one park for them all. */
    weft_worker *wk = weft__tl_worker;
    weft_task *t = wk->cur;
    int fired = -1;
    uint64_t token = weft__park_prepare(t, true);
    for (int i = 0; i < n; i++) {
        if (!cases[i].chan)
            continue;
        ws[i] = (weft__waiter){.task = t,
                               .token = token,
                               .elem = cases[i].elem,
                               .index = i,
                               .fired = &fired};
        weft__waitq_push(queue_of(cases[i].chan, cases[i].op), &ws[i]);
    }
    unlock_all(order, k);
    int code = weft__park_commit(wk, t, deadline);
    lock_all(order, k);
    for (int i = 0; i < n; i++) {
        if (!cases[i].chan)
            continue;
        weft__waitq_remove(queue_of(cases[i].chan, cases[i].op), &ws[i]);
    }
    unlock_all(order, k);
    if (fired >= 0 && code != -ETIMEDOUT && code != -ECANCELED) {
        cases[fired].rc = code; /* 0, or -EPIPE from a close */
        rc = fired;
    } else {
        rc = code;
    }
out:
    if (order != order_small) {
        free(order);
        free(perm);
        free(ws);
    }
    return rc;
}

int weft_select(weft_case *cases, int n, weft_time deadline)
{
    return select_impl(cases, n, deadline, true);
}

int weft_try_select(weft_case *cases, int n)
{
    return select_impl(cases, n, WEFT_NEVER, false);
}
