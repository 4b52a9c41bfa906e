/* SPDX-License-Identifier: MIT */
/*
 * future_bridge: turn a callback-based C library into calls a task can
 * wait on (loop.call_soon_threadsafe(fut.set_result, v), a Go channel fed
 * by the callback, new Promise((resolve, reject) => ...), a tokio oneshot).
 *
 * The "library" below runs each request on a thread and calls back from
 * it. The bridge makes a weft_future per request, which the callback
 * settles (any thread may); a task awaits it with a deadline, and a
 * canceller lets weft_future_cancel ask the library to stop. Real time
 * here: the virtual clock cannot see a foreign thread working. Exits 1
 * unless the first value arrives, and the second request times out, is
 * cancelled, and the library saw the cancel.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#include "weft.h"

/* ---- a callback-based library, on its own threads -------------------- */
typedef void (*lib_callback)(void *user, int err, int value);
typedef struct lib_request {
    pthread_t thread;
    int key, delay_ms; /* the reply is key * 10, after delay_ms */
    atomic_int cancelled;
    int started; /* the thread exists */
    lib_callback cb;
    void *user;
} lib_request;

static void *lib_thread(void *arg)
{
    lib_request *r = arg;
    struct timespec ms = {0, 1000000};
    for (int i = 0; i < r->delay_ms && !atomic_load(&r->cancelled); i++)
        nanosleep(&ms, NULL);
    int cancelled = atomic_load(&r->cancelled);
    r->cb(r->user, cancelled ? -ECANCELED : 0, cancelled ? 0 : r->key * 10);
    return NULL;
}

static int lib_get(lib_request *r, lib_callback cb, void *user)
{
    r->cb = cb;
    r->user = user;
    r->started = pthread_create(&r->thread, NULL, lib_thread, r) == 0;
    return r->started ? 0 : -EAGAIN;
}

static void lib_cancel(lib_request *r)
{
    atomic_store(&r->cancelled, 1);
}

/* ---- the bridge -------------------------------------------------------- */
static void on_reply(void *user, int err, int value) /* a library thread */
{
    weft_future *f = user;
    if (err)
        weft_future_reject(f, err);
    else
        weft_future_resolve(f, &value);
    weft_future_unref(f); /* the reference the library held */
}

static void cancel_request(void *r)
{
    lib_cancel(r); /* must not block: just ask */
}

/* Starts request r; returns a future of its int reply (NULL on failure). */
static weft_future *get_async(lib_request *r)
{
    weft_future *f;
    if (weft_future_new(&f, sizeof(int)) != 0)
        return NULL;
    weft_future_set_canceller(f, cancel_request, r);
    if (lib_get(r, on_reply, weft_future_ref(f)) != 0) {
        weft_future_unref(f); /* the callback's: it will not come */
        weft_future_unref(f);
        return NULL;
    }
    return f;
}

static int run(void *arg)
{
    lib_request *req = arg;
    weft_future *quick = get_async(&req[0]), *stuck = get_async(&req[1]);
    if (!quick || !stuck)
        return -1;
    int value = 0;
    int rc = weft_future_await(quick, &value, weft_now() + WEFT_SEC);
    printf("quick: %s, value %d\n", weft_strerror(rc), value);

    int waited = weft_future_await(stuck, NULL, weft_now() + 20 * WEFT_MSEC);
    printf("stuck: await with a 20 ms deadline: %s\n", weft_strerror(waited));
    weft_future_cancel(stuck); /* calls cancel_request: the library stops */
    int cancelled = weft_future_await(stuck, NULL, weft_now() + WEFT_SEC);
    printf("stuck: after weft_future_cancel: %s\n", weft_strerror(cancelled));

    weft_future_unref(quick);
    weft_future_unref(stuck);
    return rc == 0 && value == 70 && waited == -ETIMEDOUT &&
                   cancelled == -ECANCELED && atomic_load(&req[1].cancelled)
               ? 0
               : -1;
}

int main(void)
{
    lib_request req[2] = {{.key = 7, .delay_ms = 5},
                          {.key = 8, .delay_ms = 10000}};
    int rc = weft_run(NULL, run, req);
    for (int i = 0; i < 2; i++) /* the library's own cleanup */
        if (req[i].started)
            pthread_join(req[i].thread, NULL);
    return rc == 0 ? 0 : 1;
}
