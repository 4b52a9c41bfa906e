/* SPDX-License-Identifier: MIT */
/*
 * The wait layer's one entry (src/wait/wait.h, weft__wait): a waiter
 * queued or in an object's slot, claimed and handed a code, or taken back
 * on its deadline; and, with asserts on, the misuses its asserts catch:
 * a claim of a waiter still queued, a wake that bypasses the claim, a
 * wait without its object's lock, two waiters in one slot.
 */
#include "t.h"
#include "wait/seen.h"
#include "wait/wait.h"
#include "weft.h"

#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const weft__wait_kind wk_test = {WEFT_WAIT_NONE, "test"};

/* A primitive of the simplest kind: a lock, a queue, a slot. */
typedef struct box {
    weft__lock lock;
    weft__waitq q;
    weft__waiter *slot;
    int64_t deadline;
    bool use_slot;
    bool no_lock; /* misuse: wait without holding the lock */
    int rc;
    weft_task *task;
    weft__wait_seen seen; /* the waiter's record, read while it is parked */
} box;

static int waiter_fn(void *arg)
{
    box *b = arg;
    b->task = weft__current();
    weft__waiter w;
    weft__waiter_init(&w, NULL, 0);
    if (!b->no_lock)
        weft__lock_acquire(&b->lock);
    b->rc =
        weft__wait(&w, &(weft__wait_spec){.kind = &wk_test,
                                          .obj = b,
                                          .lock = &b->lock,
                                          .q = b->use_slot ? NULL : &b->q,
                                          .slot = b->use_slot ? &b->slot : NULL,
                                          .deadline = b->deadline});
    return 0;
}

/* Yields until b's waiter is queued (or in its slot). One worker. */
static void until_waiting(box *b)
{
    for (;;) {
        weft__lock_acquire(&b->lock);
        bool in = b->use_slot ? b->slot != NULL : !weft__waitq_empty(&b->q);
        weft__lock_release(&b->lock);
        if (in)
            return;
        weft_yield();
    }
}

static int claim_root(void *arg)
{
    box *b = arg;
    weft_scope *s = scope_open();
    spawn(waiter_fn, b);
    until_waiting(b);
    weft__wait_record(b->task, &b->seen);
    weft__lock_acquire(&b->lock);
    weft__waiter *w =
        b->use_slot ? weft__slot_claim(&b->slot) : weft__waitq_claim(&b->q);
    weft__lock_release(&b->lock);
    ASSERT(w != NULL);
    weft__wake_finish(w->task, 7);
    scope_end(s);
    return 0;
}

TEST(queued_waiter_is_claimed_and_handed_its_code)
{
    box b = {.deadline = WEFT_NEVER};
    ASSERT_EQ(t_run_virtual(1, claim_root, &b), 0);
    ASSERT_EQ(b.rc, 7);
    ASSERT(b.seen.kind == &wk_test && b.seen.obj == &b);
    ASSERT(weft__waitq_empty(&b.q));
}

TEST(slot_waiter_is_claimed_and_handed_its_code)
{
    box b = {.deadline = WEFT_NEVER, .use_slot = true};
    ASSERT_EQ(t_run_virtual(1, claim_root, &b), 0);
    ASSERT_EQ(b.rc, 7);
    ASSERT(b.seen.kind == &wk_test && b.seen.obj == &b);
    ASSERT(b.slot == NULL);
}

static int deadline_root(void *arg)
{
    box *b = arg;
    b->deadline = weft_now() + WEFT_MSEC;
    weft_scope *s = scope_open();
    spawn(waiter_fn, b);
    scope_end(s);
    return 0;
}

TEST(unclaimed_waiter_leaves_its_queue_on_its_deadline)
{
    box b = {0};
    ASSERT_EQ(t_run_virtual(1, deadline_root, &b), 0);
    ASSERT_EQ(b.rc, -ETIMEDOUT);
    ASSERT(weft__waitq_empty(&b.q));
}

TEST(unclaimed_waiter_leaves_its_slot_on_its_deadline)
{
    box b = {.use_slot = true};
    ASSERT_EQ(t_run_virtual(1, deadline_root, &b), 0);
    ASSERT_EQ(b.rc, -ETIMEDOUT);
    ASSERT(b.slot == NULL);
}

/* ---- misuse, caught by the entry's asserts ---- */

/* Runs fn(arg) in a runtime in a child whose stderr is a pipe; checks
 * that it aborted, saying msg. With the asserts compiled out the misuse
 * is not checked (it is undefined): the test is skipped, not passed. */
static void aborts_with(weft_fn fn, const char *msg)
{
#if !defined(WEFT__ASSERTS)
    (void)fn;
    (void)msg;
    T_SKIP("the library's asserts are compiled out");
#else
    int fds[2];
    ASSERT(pipe(fds) == 0);
    pid_t pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        box b = {.deadline = WEFT_NEVER};
        t_run_virtual(1, fn, &b);
        _exit(0);
    }
    close(fds[1]);
    char out[2048];
    size_t n = 0;
    ssize_t k;
    while (n + 1 < sizeof out &&
           (k = read(fds[0], out + n, sizeof out - 1 - n)) > 0)
        n += (size_t)k;
    out[n] = '\0';
    close(fds[0]);
    int status;
    ASSERT(waitpid(pid, &status, 0) == pid);
    if (!strstr(out, msg))
        fprintf(stderr, "child said: %s\n", out);
    ASSERT(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
    ASSERT(strstr(out, msg) != NULL);
#endif
}

/* A waker that claims a waiter it has not taken off its queue. */
static int claim_queued_root(void *arg)
{
    box *b = arg;
    weft_scope *s = scope_open();
    spawn(waiter_fn, b);
    until_waiting(b);
    weft__lock_acquire(&b->lock);
    weft__waiter_claim(b->q.head);
    weft__lock_release(&b->lock);
    scope_end(s);
    return 0;
}

TEST(claim_of_a_queued_waiter_asserts)
{
    aborts_with(claim_queued_root, "a waiter claimed while still queued");
}

/* A waker that wakes the task by its park token, around its waiter. */
static int wake_around_root(void *arg)
{
    box *b = arg;
    weft_scope *s = scope_open();
    spawn(waiter_fn, b);
    until_waiting(b);
    weft__lock_acquire(&b->lock);
    weft__waiter *w = b->q.head;
    weft__waitq_remove(&b->q, w);
    weft__lock_release(&b->lock);
    weft__wake(w->task, w->token, 0);
    scope_end(s);
    return 0;
}

TEST(wake_around_the_claim_asserts)
{
    aborts_with(wake_around_root, "a waiter woken without a claim");
}

static int no_lock_root(void *arg)
{
    box *b = arg;
    b->no_lock = true;
    b->deadline = weft_now() + WEFT_MSEC;
    return waiter_fn(b);
}

TEST(wait_without_the_lock_asserts)
{
    aborts_with(no_lock_root, "a wait without its object's lock");
}

/* Two tasks waiting in one object's slot. */
static int slot_twice_root(void *arg)
{
    box *b = arg;
    b->use_slot = true;
    weft_scope *s = scope_open();
    spawn(waiter_fn, b);
    until_waiting(b);
    spawn(waiter_fn, b);
    scope_end(s);
    return 0;
}

TEST(two_waiters_in_one_slot_assert)
{
    aborts_with(slot_twice_root, "an object's one waiter, twice");
}
