/* SPDX-License-Identifier: MIT */
/*
 * Channels.
 *
 * A channel is a ring buffer of `cap` values and two wait queues, senders
 * and receivers, all under one spinlock (as Go's hchan). The rule that
 * keeps every value exactly once: a value moves only under the channel's
 * lock, and it moves into or out of a waiting task only after the mover
 * has claimed that task's park (weft__waiter_claim). A waiter whose claim
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
 * weft_select (select.c) drives a channel case through the four
 * weft__chan_case_* functions at the end, as the wait layer's case
 * interface says: under the channel's lock, a case ready now is
 * performed as a send or receive would be; otherwise its waiter queues on
 * the channel like a blocked sender's or receiver's, with the select's
 * token, so a mover that claims it hands it the value and wins the
 * select for it.
 */
#include "sync/cases.h"
#include "sync/sync.h"
#include "util/fault.h"
#include "wait/many.h"
#include "wait/wait.h"

#include <stdlib.h>
#include <string.h>

const weft__wait_kind weft__wk_send = {WEFT_WAIT_SEND, "channel send"};
const weft__wait_kind weft__wk_recv = {WEFT_WAIT_RECV, "channel receive"};

#define CHAN_MAGIC 0x6368616eu /* "chan" */
#define CHAN_DEAD 0x64656164u  /* "dead": freed (weft__husk_free) */
#define MAX_ELEM 65536

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
    weft_chan *c = weft__calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    if (capacity) {
        c->buf = weft__malloc(capacity * elem_size);
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
        /* Receivers wait only on an empty ring. */
        WEFT_ASSERT_MSG(c->len == 0,
                        "a receiver waited beside buffered values");
        weft__copy_small(w->elem, elem, c->elem);
        *woken = w;
        return 0;
    }
    if (c->len < c->cap) {
        weft__copy_small(slot(c, c->len), elem, c->elem);
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
        weft__copy_small(out, slot(c, 0), c->elem);
        c->head = c->head + 1 == c->cap ? 0 : c->head + 1;
        c->len--;
        weft__waiter *w = weft__waitq_claim(&c->sendq);
        if (w) { /* the ring had been full: the sender's value joins it */
            WEFT_ASSERT_MSG(c->len + 1 == c->cap,
                            "a sender waited beside room in the ring");
            weft__copy_small(slot(c, c->len), w->elem, c->elem);
            c->len++;
            *woken = w;
        }
        return 0;
    }
    weft__waiter *w = weft__waitq_claim(&c->sendq);
    if (w) { /* rendezvous: straight from the sender */
        weft__copy_small(out, w->elem, c->elem);
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

/* The wait of chan_op, c's lock held. A function of its own, so that an
 * operation that needs no wait (a buffered channel's usual case) runs
 * without this one's frame (the waiter and the wait's spec), inlined in
 * each public call (bench/chanflow: 1.14x to 1.58x the messages a
 * second). */
static __attribute__((noinline)) int chan_wait(weft_chan *c, weft_op op,
                                               void *elem, int64_t deadline)
{
    weft__waiter self;
    weft__waiter_init(&self, elem, 0);
    return weft__wait(
        &self, &(weft__wait_spec){
                   .kind = op == WEFT_OP_SEND ? &weft__wk_send : &weft__wk_recv,
                   .obj = c,
                   .lock = &c->lock,
                   .q = queue_of(c, op),
                   .deadline = deadline,
                   .flags = op == WEFT_OP_SEND
                                ? WEFT__WAIT_COMPACT
                                : WEFT__WAIT_COMPACT | WEFT__WAIT_ELEM_OUT,
                   .elem_size = c->elem});
}

/* A send (elem is the value) or a receive (elem is the buffer); waits
 * unless wait is false, when it returns -EAGAIN instead. */
static inline __attribute__((always_inline)) int
chan_op(weft_chan *c, weft_op op, void *elem, int64_t deadline, bool wait)
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
        if (woken) { /* rc is 0: nothing kept across the wake */
            finish(woken, 0);
            return 0;
        }
        return rc;
    }
    rc = chan_wait(c, op, elem, deadline);
    /* Not a tail call: the wait returns into the public call, which is
     * the frame the dump and the deadlock report name, at its line in
     * chan.c (observe/where.c). A compiler barrier, no instruction. */
    atomic_signal_fence(memory_order_seq_cst);
    return rc;
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

/* ---- select's channel cases (see wait/many.h; select.c drives them) ---- */

int weft__chan_case_check(const weft_case *c)
{
    if (!c->chan)
        return 1;
    if (!chan_ok(c->chan) || !c->elem)
        return -EINVAL;
    return 0;
}

weft__lock *weft__chan_case_lock(weft_case *c)
{
    return &c->chan->lock;
}

int weft__chan_case_try(weft_case *c, weft__arm *a, weft__chain *woken)
{
    weft__waiter *w = NULL;
    int rc = op_locked(c->chan, c->op, c->elem, &w);
    if (rc == -EAGAIN) {
        a->q = queue_of(c->chan, c->op);
        a->w.elem = c->elem;
        return -EAGAIN;
    }
    if (w)
        weft__chain_add(woken, w);
    c->rc = rc;
    return 0;
}

void weft__chan_case_won(weft_case *c, int code)
{
    c->rc = code; /* 0, or -EPIPE from a close */
}
