/* SPDX-License-Identifier: MIT */
/*
 * weft_nats: nats.c driven by weft (see include/weft_nats.h). Built on
 * weft.h alone: this file knows nothing of the runtime's insides, and the
 * runtime nothing of nats.c.
 *
 * Three kinds of threads touch a connection, and what each may do:
 *
 * 1. The driver task (one per connection, on one worker). It alone calls
 *    natsConnection_ProcessReadEvent and _ProcessWriteEvent. It parks in
 *    one weft_select on the connection's wake semaphore and on the socket
 *    (READ while nats.c wants reads, WRITE while it wants writes).
 *
 * 2. nats.c's callers of the adapter: attach (the blocking pool's thread
 *    that runs natsConnection_Connect, then nats.c's reconnect thread),
 *    read and write (any thread that holds nats.c's connection lock: a
 *    publishing task, the driver itself, nats.c's ping timer) and detach
 *    (whoever closes). They never touch the socket: under c->mu they
 *    record what nats.c asks for (the socket, read and write interest,
 *    detached) and post the driver (wake()). One exception: the read
 *    interest is removed only by nats.c's _evStopPolling, just before it
 *    closes the socket, so that callback also tells weft to forget the
 *    descriptor (weft_fd_forget) while its number still names it.
 *
 * 3. nats.c's delivery thread of the reply inbox and its callback thread
 *    (connection events). They only put what they get into the request
 *    table's futures and the connection's event channel
 *    (weft_chan_try_send, counted when full). Subscriptions have no
 *    thread: they are nats.c's synchronous kind, and the driver moves
 *    their messages into their rings after each read (drain_subs), so
 *    that a message reaches its task without waking another thread. So do
 *    replies, through the reply slots (see struct slot); only requests
 *    past the slots' number are answered through the asynchronous inbox,
 *    since nats.c's NextMsg drops a "no responders" status's subject,
 *    which names its request.
 *
 * Edge-triggered readiness. weft's poller reports edges, and nats.c reads
 * and writes once per Process*Event call. So the driver reads again while
 * a MSG_PEEK says bytes are waiting (yielding now and then, so that a
 * busy connection does not starve its worker), and writes as soon as
 * nats.c adds write interest (the socket is usually writable, and no edge
 * would come): it waits for a WRITE edge only after a write that left
 * data behind, which means the socket's buffer was full.
 *
 * Lifetime. A connection is reference-counted: its user, its driver, the
 * connect call on the blocking pool while it runs, the reply inbox's
 * subscription until nats.c says it completed, and nats.c's callbacks
 * until the closed callback. natsConnection_Destroy runs with the last
 * reference, after natsConnection_Close (run by the driver, on the
 * blocking pool) has returned. Closing: weft_nats_close (or a cancel of
 * the driver's scope, or nats.c giving up reconnecting) makes the driver
 * open a shielded scope and run the close in a child task (the closer).
 * The closer first flushes (a PING and its PONG, so that what was
 * published has reached the server) while the driver still reads; then
 * it asks the driver to stop reading and waits until it has, and only
 * then runs natsConnection_Close on the blocking pool. nats.c's
 * ProcessReadEvent reads the socket outside nats.c's lock, and Close
 * closes it under that lock: the two must never overlap, or the read
 * may land on a descriptor number that another file has taken. The
 * driver keeps serving writes during Close (nats.c writes under its
 * lock), and ends once Close has returned and nats.c has detached. One
 * such overlap is nats.c's own and stays: its ping timer, finding the
 * connection stale (two pings unanswered), closes the socket from the
 * timer's thread.
 */
#define _GNU_SOURCE 1
#include "weft_nats.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#define NBUCKETS 64
#define DEFAULT_EVENTS 64
#define DEFAULT_BUFFERED ((size_t)8 << 20)
#define DEFAULT_CAPACITY 1024
#define READS_BEFORE_YIELD 32
#define CLOSE_FLUSH_MS 500 /* as natsConnection_Close's own flush */
#define SLOTS 8            /* requests that can wait on a slot at once */
#define DEAD_BATCH 64      /* received messages destroyed together */

/* A request (or flush) waiting for its reply: on the requesting task's
 * stack, linked in c->buckets under c->pmu while it waits. */
typedef struct pending {
    uint64_t token;       /* the last part of its reply subject */
    weft_future *f;       /* resolved with the reply's natsMsg * */
    struct pending *next; /* its bucket's list */
    int slot;             /* the slot it waits on, or -1: the inbox */
} pending;

/* A reply slot: a synchronous subscription to inbox.s<k>.*, drained by
 * the driver (drain_slots), on which one request at a time waits, so
 * that a "no responders" status there, which nats.c's NextMsg reports
 * without its subject, still names its request. A request given up
 * while on its slot leaves the slot dirty (its status may still come)
 * until a marker sent to inbox.s<k>.m after it comes back. */
typedef struct slot {
    natsSubscription *ns;
    uint64_t token; /* the request on it, 0: none */
    bool dirty;
} slot;

struct weft_nats_conn {
    _Atomic long refs;   /* see "Lifetime" above; the last frees */
    natsConnection *nc;  /* set by the first attach, under mu; fixed */
    natsOptions *nopts;  /* for connect_fn */
    _Atomic int cstate;  /* connect_fn: 0 not started, 1 ran, 2 dropped */
    size_t max_buffered; /* publish's backpressure threshold */
    _Atomic int closing; /* set once: calls fail with -ENOTCONN */

    /* The adapter's state: written by nats.c's threads and the connect
     * and close calls, read by the driver, all under mu. */
    pthread_mutex_t mu;
    int fd;              /* the socket to watch, -1: none */
    uint64_t gen;        /* attaches so far: a new socket when it moves */
    bool want_read;      /* nats.c polls for reads */
    bool want_write;     /* ... and for writes */
    uint64_t write_adds; /* times nats.c added write interest */
    bool detached;       /* nats.c detached: the connection is closed */
    bool connect_done;   /* connect_fn returned */
    bool connect_failed; /* ... with an error: nothing to close */
    bool abandoned;      /* weft_nats_connect's caller left first */
    bool close_req;      /* weft_nats_close asked the driver to close */
    bool quiet_req;      /* the closer flushed: the driver reads no more */
    bool closer_done;    /* natsConnection_Close has returned */
    _Atomic int woken;   /* a wake permit is posted and not yet seen */
    weft_sem wake;       /* the driver's wake-up (at most one permit) */
    weft_sem quiet;      /* the driver's answer to quiet_req */
    weft_future *ended;  /* resolved when the driver ends */

    /* Requests: under pmu (nats.c's inbox thread and requesting tasks). */
    pthread_mutex_t pmu;
    pending *buckets[NBUCKETS];
    size_t npending;
    bool inbox_closed; /* the inbox subscription completed */
    _Atomic uint64_t next_token;
    char inbox[64]; /* "_INBOX.<nuid>": replies come to inbox.<token> */
    natsSubscription *isub;
    slot slots[SLOTS];  /* replies to inbox.s<k>.<token> */
    _Atomic int nslots; /* slots made (their ns fixed before it is set) */

    /* Publish's backpressure: publishers wait on bcv, the driver
     * broadcasts after writes when bwaiters says someone waits. */
    weft_mutex bmu;
    weft_cond bcv;
    _Atomic int bwaiters;

    /* Subscriptions, whose messages the driver moves from nats.c's
     * lists into their rings (drain_subs): under smu. */
    pthread_mutex_t smu;
    weft_nats_sub *subs;
    bool subs_ended;       /* the driver ended: no new subscription */
    _Atomic int drain_req; /* a receiver made room in a starved ring */

    /* Received messages done with, destroyed DEAD_BATCH at a time
     * (msg_release): under dmu. */
    pthread_mutex_t dmu;
    natsMsg *dead[DEAD_BATCH];
    int ndead;
    bool dead_now; /* the driver ended: destroyed at once */

    weft_chan *events; /* weft_nats_event, filled by nats.c's threads */
    _Atomic uint64_t st_attaches, st_disconnects, st_reconnects, st_slow,
        st_errors, st_events_dropped, st_late, st_reads, st_writes;
};

struct weft_nats_sub {
    _Atomic long refs;    /* its user and the driver's list (while linked) */
    natsSubscription *ns; /* synchronous: the driver takes its messages */
    weft_nats_conn *c;
    struct weft_nats_sub *next; /* in c->subs, under c->smu */
    bool linked;                /* in c->subs (under c->smu) */
    weft_sem items;             /* a permit per queued message, +1 once ended */
    /* The ring, under mu: the driver pushes, tasks pop. */
    pthread_mutex_t mu;
    natsMsg **ring;
    size_t cap, head, len;
    bool starved;               /* full, with messages left at nats.c */
    uint64_t taken, full_waits; /* received: taken + len */
    int64_t last_dropped;       /* nats.c's count, kept once it forgets */
};

/* ---- errors ---- */

int weft_nats_error(natsStatus s)
{
    switch (s) {
    case NATS_OK:
        return 0;
    case NATS_TIMEOUT:
        return -ETIMEDOUT;
    case NATS_NO_SERVER:
        return -ECONNREFUSED;
    case NATS_CONNECTION_CLOSED:
    case NATS_CONNECTION_DISCONNECTED:
    case NATS_STALE_CONNECTION:
        return -ENOTCONN;
    case NATS_INVALID_SUBJECT:
    case NATS_INVALID_ARG:
    case NATS_INVALID_SUBSCRIPTION:
    case NATS_ILLEGAL_STATE:
    case NATS_INVALID_QUEUE_NAME:
        return -EINVAL;
    case NATS_NO_MEMORY:
        return -ENOMEM;
    case NATS_INSUFFICIENT_BUFFER:
        return -ENOBUFS;
    case NATS_NO_RESPONDERS:
        return -ESRCH;
    case NATS_MAX_PAYLOAD:
        return -EMSGSIZE;
    case NATS_NOT_PERMITTED:
    case NATS_CONNECTION_AUTH_FAILED:
        return -EACCES;
    default:
        return -EIO;
    }
}

/* ---- the connection's lifetime ---- */

static void conn_ref(weft_nats_conn *c)
{
    atomic_fetch_add(&c->refs, 1);
}

static void conn_unref(weft_nats_conn *c)
{
    if (atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    if (c->isub)
        natsSubscription_Destroy(c->isub);
    for (int k = 0; k < atomic_load(&c->nslots); k++)
        natsSubscription_Destroy(c->slots[k].ns);
    if (c->nc)
        natsConnection_Destroy(c->nc); /* closed already: does not block */
    if (c->nopts)
        natsOptions_Destroy(c->nopts);
    weft_chan_unref(c->events);
    weft_future_unref(c->ended);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->pmu);
    pthread_mutex_destroy(&c->smu);
    pthread_mutex_destroy(&c->dmu);
    free(c);
}

/* Destroys m, a received message weft is done with, later and with
 * others: natsMsg_Destroy hands a received message to nats.c's collector
 * thread, and wakes that thread when it sleeps, which is a wake-up of
 * another thread for every message (two on every remote ask); a batch
 * wakes it once. The driver destroys the rest when it ends (m NULL), and
 * from then on each at once: not later, from the last reference's
 * thread, which can be nats.c's callback thread after nats.c's collector
 * has stopped (nats_Close), where they would never be freed. */
static void msg_release(weft_nats_conn *c, natsMsg *m)
{
    natsMsg *batch[DEAD_BATCH];
    int n = 0;
    pthread_mutex_lock(&c->dmu);
    if (m)
        c->dead[c->ndead++] = m;
    else
        c->dead_now = true;
    if (c->dead_now || c->ndead == DEAD_BATCH) {
        n = c->ndead;
        memcpy(batch, c->dead, (size_t)n * sizeof *batch);
        c->ndead = 0;
    }
    pthread_mutex_unlock(&c->dmu);
    for (int i = 0; i < n; i++)
        natsMsg_Destroy(batch[i]);
}

/* Wakes the driver: at most one permit is ever posted, and the driver
 * clears c->woken before it reads the state (see drive_once). */
static void wake(weft_nats_conn *c)
{
    if (!atomic_exchange(&c->woken, 1))
        weft_sem_release(&c->wake, 1);
}

/* Runs stmt holding c->mu, then wakes the driver. */
#define WITH_STATE(c, stmt)                                                    \
    do {                                                                       \
        pthread_mutex_lock(&(c)->mu);                                          \
        stmt;                                                                  \
        pthread_mutex_unlock(&(c)->mu);                                        \
        wake(c);                                                               \
    } while (0)

/* ---- the event-loop adapter: any thread (see the top) ---- */

static natsStatus ev_attach(void **user, void *loop, natsConnection *nc,
                            natsSock sock)
{
    weft_nats_conn *c = loop;
    WITH_STATE(c, {
        if (!c->nc)     /* the first attach comes before Connect returns; */
            c->nc = nc; /* later ones (reconnects) do not write it again */
        c->fd = (int)sock;
        c->gen++;
        c->want_read = true;
        c->want_write = false;
    });
    atomic_fetch_add(&c->st_attaches, 1);
    *user = c;
    return NATS_OK;
}

static natsStatus ev_read(void *user, bool add)
{
    weft_nats_conn *c = user;
    int gone = -1;
    WITH_STATE(c, {
        c->want_read = add;
        if (!add) { /* _evStopPolling: nats.c closes the socket next */
            gone = c->fd;
            c->fd = -1;
        }
    });
    if (gone >= 0)
        weft_fd_forget(gone);
    return NATS_OK;
}

static natsStatus ev_write(void *user, bool add)
{
    weft_nats_conn *c = user;
    WITH_STATE(c, {
        c->want_write = add;
        c->write_adds += add;
    });
    return NATS_OK;
}

static natsStatus ev_detach(void *user)
{
    weft_nats_conn *c = user;
    WITH_STATE(c, {
        c->detached = true;
        c->fd = -1;
    });
    return NATS_OK;
}

/* ---- connection events: nats.c's callback thread ---- */

static void post_event(weft_nats_conn *c, weft_nats_event_kind kind,
                       natsStatus s)
{
    weft_nats_event ev = {.kind = kind, .status = (int)s};
    if (weft_chan_try_send(c->events, &ev) != 0)
        atomic_fetch_add(&c->st_events_dropped, 1);
}

static void on_disconnected(natsConnection *nc, void *closure)
{
    (void)nc;
    weft_nats_conn *c = closure;
    atomic_fetch_add(&c->st_disconnects, 1);
    post_event(c, WEFT_NATS_EVENT_DISCONNECTED, NATS_OK);
}

static void on_reconnected(natsConnection *nc, void *closure)
{
    (void)nc;
    weft_nats_conn *c = closure;
    atomic_fetch_add(&c->st_reconnects, 1);
    post_event(c, WEFT_NATS_EVENT_RECONNECTED, NATS_OK);
}

/* The last callback nats.c makes for a connection: it drops their
 * reference. */
static void on_closed(natsConnection *nc, void *closure)
{
    (void)nc;
    weft_nats_conn *c = closure;
    post_event(c, WEFT_NATS_EVENT_CLOSED, NATS_OK);
    conn_unref(c);
}

static void on_error(natsConnection *nc, natsSubscription *sub, natsStatus err,
                     void *closure)
{
    (void)nc;
    (void)sub;
    weft_nats_conn *c = closure;
    if (err == NATS_SLOW_CONSUMER) {
        atomic_fetch_add(&c->st_slow, 1);
        post_event(c, WEFT_NATS_EVENT_SLOW_CONSUMER, err);
    } else {
        atomic_fetch_add(&c->st_errors, 1);
        post_event(c, WEFT_NATS_EVENT_ERROR, err);
    }
}

/* ---- the driver ---- */

static void drain_slots(weft_nats_conn *c);
static void drain_subs(weft_nats_conn *c);
static void end_subs(weft_nats_conn *c);

typedef struct snapshot {
    natsConnection *nc;
    int fd;
    uint64_t gen, write_adds;
    bool want_read, want_write, detached, connect_done, connect_failed,
        close_req, quiet_req, closer_done;
} snapshot;

static snapshot look(weft_nats_conn *c)
{
    atomic_store(&c->woken, 0);
    pthread_mutex_lock(&c->mu);
    snapshot s = {
        .nc = c->nc,
        .fd = c->fd,
        .gen = c->gen,
        .write_adds = c->write_adds,
        .want_read = c->want_read,
        .want_write = c->want_write,
        .detached = c->detached,
        .connect_done = c->connect_done,
        .connect_failed = c->connect_failed,
        .close_req = c->close_req,
        .quiet_req = c->quiet_req,
        .closer_done = c->closer_done,
    };
    pthread_mutex_unlock(&c->mu);
    return s;
}

/* Bytes are waiting on the socket of snapshot s (not EOF, not an error:
 * those the next ProcessReadEvent after a READ edge finds by itself).
 * Only while the socket is still the connection's: ProcessReadEvent may
 * have closed it (nats.c says so with ev_read or ev_detach, under c->mu,
 * before it closes the socket), and its number may belong to another file
 * now. Holding c->mu keeps it open during the peek. */
static bool bytes_waiting(weft_nats_conn *c, const snapshot *s)
{
    char b;
    pthread_mutex_lock(&c->mu);
    bool yes = c->fd == s->fd && c->gen == s->gen &&
               recv(s->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
    pthread_mutex_unlock(&c->mu);
    return yes;
}

/* Wakes publishers waiting for the outgoing buffer to drain. */
static void room_made(weft_nats_conn *c)
{
    if (atomic_load(&c->bwaiters) == 0)
        return;
    if (weft_mutex_lock(&c->bmu) == 0) {
        weft_cond_broadcast(&c->bcv);
        weft_mutex_unlock(&c->bmu);
    }
}

/* On the blocking pool: a PING and its PONG while the driver still
 * reads, when there is a server to answer. Close flushes only what is
 * still buffered, and only with a reader; without this, bytes written
 * but not yet taken by the server could go with a reset, since a socket
 * closed with unread data is reset. */
static int flush_blocking(void *arg)
{
    natsConnection *nc = ((weft_nats_conn *)arg)->nc;
    if (natsConnection_Status(nc) == NATS_CONN_STATUS_CONNECTED)
        (void)natsConnection_FlushTimeout(nc, CLOSE_FLUSH_MS);
    return 0;
}

static int close_blocking(void *arg)
{
    natsConnection_Close(((weft_nats_conn *)arg)->nc);
    return 0;
}

/* Flushes, stops the driver's reads, closes (see "Lifetime" at the top),
 * then tells the driver. A child of the driver's shielded scope: never
 * cancelled. */
static int closer(void *arg)
{
    weft_nats_conn *c = arg;
    weft_blocking(flush_blocking, c);
    WITH_STATE(c, c->quiet_req = true);
    weft_sem_acquire(&c->quiet, 1);
    weft_blocking(close_blocking, c);
    WITH_STATE(c, c->closer_done = true);
    return 0;
}

/* Where the driver stands between two looks at the state. */
typedef struct drive_state {
    uint64_t gen, write_adds; /* as last seen */
    bool try_read, try_write; /* call nats.c without waiting first */
    unsigned reads;           /* ProcessReadEvent calls since a park */
    weft_scope *shield;       /* open once the connection is ending */
    bool cancelled;           /* the driver's scope was cancelled */
    bool quiet;               /* reads no more: the closer may close */
    bool closer_started;
} drive_state;

/* Opens the shielded scope the driver ends in, and starts the closer
 * there once there is a connection to close. */
static void ending(weft_nats_conn *c, drive_state *d, const snapshot *s)
{
    atomic_store(&c->closing, 1);
    if (!d->shield) {
        weft_scope_opts o = {.shield = 1};
        if (weft_scope_open(&d->shield, &o) != 0)
            d->shield = NULL;
        room_made(c);
    }
    if (d->shield && s->connect_done && !s->connect_failed &&
        !d->closer_started && weft_spawn(d->shield, closer, c) >= 0)
        d->closer_started = true;
}

/* One step of the driver: calls nats.c if it can without waiting, else
 * parks until the socket or the state says something. Returns 1 when the
 * driver is done. */
static int drive_once(weft_nats_conn *c, drive_state *d)
{
    snapshot s = look(c);
    if (atomic_load_explicit(&c->drain_req, memory_order_relaxed) &&
        atomic_exchange(&c->drain_req, 0))
        drain_subs(c);
    if (s.connect_done && s.connect_failed)
        return 1;
    if (d->closer_started && s.closer_done && s.detached)
        return 1;
    if (s.close_req || s.detached || d->cancelled)
        ending(c, d, &s);  /* until the closer could start */
    if (s.gen != d->gen) { /* a new socket: look at it at once */
        d->gen = s.gen;
        d->try_read = true;
    }
    if (s.quiet_req && !d->quiet) { /* between reads: none is under way */
        d->quiet = true;
        weft_sem_release(&c->quiet, 1);
    }
    if (s.write_adds != d->write_adds) {
        d->write_adds = s.write_adds;
        d->try_write = true;
    }
    if (s.fd >= 0 && s.want_write && d->try_write) {
        d->try_write = false;
        atomic_fetch_add(&c->st_writes, 1);
        natsConnection_ProcessWriteEvent(s.nc);
        room_made(c);
        return 0;
    }
    bool reads = s.fd >= 0 && s.want_read && !d->quiet;
    if (reads && d->try_read) {
        atomic_fetch_add(&c->st_reads, 1);
        natsConnection_ProcessReadEvent(s.nc);
        drain_slots(c);
        drain_subs(c);
        d->try_read = bytes_waiting(c, &s);
        if (d->try_read && ++d->reads % READS_BEFORE_YIELD == 0)
            weft_yield();
        return 0;
    }
    d->reads = 0;
    weft_case cases[3] = {
        {.op = WEFT_OP_SEM, .sem = &c->wake},
        {.op = WEFT_OP_READ, .fd = reads ? s.fd : -1},
        {.op = WEFT_OP_WRITE, .fd = s.fd >= 0 && s.want_write ? s.fd : -1},
    };
    int i = weft_select(cases, 3, WEFT_NEVER);
    if (i == 1)
        d->try_read = true;
    else if (i == 2)
        d->try_write = true;
    else if (i < 0) { /* cancelled (or out of memory): close, shielded */
        d->cancelled = true;
        ending(c, d, &s);
    }
    return 0;
}

static int driver(void *arg)
{
    weft_nats_conn *c = arg;
    drive_state d = {0};
    while (!drive_once(c, &d)) {
    }
    atomic_store(&c->closing, 1);
    end_subs(c);
    drain_slots(c); /* late replies: destroyed now, not by nats.c later */
    msg_release(c, NULL);
    if (d.shield) {
        weft_scope_join(d.shield);
        weft_scope_free(d.shield);
    }
    room_made(c);
    weft_future_resolve(c->ended, NULL);
    conn_unref(c);
    return 0;
}

/* ---- connecting ---- */

static int connect_fn(void *arg)
{
    weft_nats_conn *c = arg;
    int idle = 0;
    if (!atomic_compare_exchange_strong(&c->cstate, &idle, 1))
        return -ECANCELED; /* its caller left: the references are its */
    natsConnection *nc = NULL;
    natsStatus st = natsConnection_Connect(&nc, c->nopts);
    WITH_STATE(c, {
        c->nc = st == NATS_OK ? nc : NULL;
        c->connect_done = true;
        c->connect_failed = st != NATS_OK;
        if (st == NATS_OK && c->abandoned)
            c->close_req = true;
    });
    if (st != NATS_OK)
        conn_unref(c); /* nats.c's callbacks' reference: none will come */
    conn_unref(c);
    return weft_nats_error(st);
}

static natsOptions *make_options(weft_nats_conn *c, const weft_nats_opts *o,
                                 weft_time deadline)
{
    natsOptions *no = NULL;
    if (natsOptions_Create(&no) != NATS_OK)
        return NULL;
    natsStatus st = natsOptions_SetURL(no, o->url ? o->url : NATS_DEFAULT_URL);
    if (st == NATS_OK && o->name)
        st = natsOptions_SetName(no, o->name);
    if (st == NATS_OK)
        st = natsOptions_SetEventLoop(no, c, ev_attach, ev_read, ev_write,
                                      ev_detach);
    /* Without it, a publish wakes nats.c's flusher thread, which waits a
     * millisecond before it asks the driver to write (to gather more):
     * a millisecond on every request and reply. With it the publish asks
     * at once; what is published before the driver runs still goes out
     * in one write. */
    if (st == NATS_OK)
        st = natsOptions_SetSendAsap(no, true);
    if (st == NATS_OK)
        st = natsOptions_SetDisconnectedCB(no, on_disconnected, c);
    if (st == NATS_OK)
        st = natsOptions_SetReconnectedCB(no, on_reconnected, c);
    if (st == NATS_OK)
        st = natsOptions_SetClosedCB(no, on_closed, c);
    if (st == NATS_OK)
        st = natsOptions_SetErrorHandler(no, on_error, c);
    if (st == NATS_OK && o->noreconnect)
        st = natsOptions_SetAllowReconnect(no, false);
    if (st == NATS_OK && o->max_reconnect)
        st = natsOptions_SetMaxReconnect(no, o->max_reconnect);
    if (st == NATS_OK && o->reconnect_wait_ns > 0)
        st = natsOptions_SetReconnectWait(
            no, (o->reconnect_wait_ns + WEFT_MSEC - 1) / WEFT_MSEC);
    if (st == NATS_OK && deadline != WEFT_NEVER) {
        int64_t left = (deadline - weft_now()) / WEFT_MSEC;
        st = natsOptions_SetTimeout(no, left < 1 ? 1 : left);
    }
    if (st != NATS_OK) {
        natsOptions_Destroy(no);
        return NULL;
    }
    return no;
}

static weft_nats_conn *conn_new(const weft_nats_opts *o)
{
    weft_nats_conn *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    atomic_init(&c->refs, 1);
    c->fd = -1;
    c->max_buffered = o->max_buffered ? o->max_buffered : DEFAULT_BUFFERED;
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->pmu, NULL);
    pthread_mutex_init(&c->smu, NULL);
    pthread_mutex_init(&c->dmu, NULL);
    weft_sem_init(&c->wake, 0);
    weft_sem_init(&c->quiet, 0);
    size_t nev = o->event_queue ? o->event_queue : DEFAULT_EVENTS;
    if (weft_chan_new(&c->events, sizeof(weft_nats_event), nev) != 0 ||
        weft_future_new(&c->ended, 0) != 0) {
        conn_unref(c);
        return NULL;
    }
    return c;
}

static void inbox_cb(natsConnection *nc, natsSubscription *sub, natsMsg *msg,
                     void *closure);
static void inbox_done(void *closure);

/* The connection's reply inbox: one subscription to inbox.*. */
static int inbox_open(weft_nats_conn *c)
{
    char *ib = NULL;
    if (natsInbox_Create(&ib) != NATS_OK)
        return -ENOMEM;
    snprintf(c->inbox, sizeof c->inbox, "%s", ib);
    natsInbox_Destroy(ib);
    char wild[sizeof c->inbox + 16];
    snprintf(wild, sizeof wild, "%s.*", c->inbox);
    natsStatus st =
        natsConnection_Subscribe(&c->isub, c->nc, wild, inbox_cb, c);
    if (st != NATS_OK)
        return weft_nats_error(st);
    /* Replies are never dropped for a slow consumer: each has a waiter,
     * and the inbox's callback never waits. */
    natsSubscription_SetPendingLimits(c->isub, -1, -1);
    conn_ref(c);
    st = natsSubscription_SetOnCompleteCB(c->isub, inbox_done, c);
    if (st != NATS_OK) {
        /* Closed already: its thread may still run inbox_cb, so its
         * reference is kept (a leak of one connection, on a close that
         * raced with the connect). */
        return weft_nats_error(st);
    }
    /* The slots, published by their count: those past a subscription
     * that failed are not made (requests wait on the inbox instead). */
    int k = 0;
    for (; k < SLOTS; k++) {
        snprintf(wild, sizeof wild, "%s.s%d.*", c->inbox, k);
        if (natsConnection_SubscribeSync(&c->slots[k].ns, c->nc, wild) !=
            NATS_OK)
            break;
        natsSubscription_SetPendingLimits(c->slots[k].ns, -1, -1);
    }
    atomic_store(&c->nslots, k);
    return 0;
}

int weft_nats_connect(weft_scope *s, const weft_nats_opts *o,
                      weft_nats_conn **out, weft_time deadline)
{
    weft_nats_opts none = {0};
    if (!out)
        return -EINVAL;
    *out = NULL;
    if (!o)
        o = &none;
    if (weft_worker_id() < 0)
        return -EPERM;
    weft_nats_conn *c = conn_new(o);
    if (!c)
        return -ENOMEM;
    if (!(c->nopts = make_options(c, o, deadline))) {
        conn_unref(c);
        return -ENOMEM;
    }
    conn_ref(c); /* the driver's */
    int rc = weft_spawn_ex(s, driver, c, &(weft_spawn_opts){.name = "nats"});
    if (rc < 0) {
        conn_unref(c);
        conn_unref(c);
        return rc;
    }
    conn_ref(c); /* connect_fn's */
    conn_ref(c); /* nats.c's callbacks', dropped by on_closed */
    rc = weft_blocking_until(connect_fn, c, deadline);
    if (rc == 0)
        rc = inbox_open(c);
    if (rc == 0) {
        *out = c;
        return 0;
    }
    /* Failed, or the caller leaves first: the driver closes what was
     * made, or ends when connect_fn says nothing was. A connect_fn that
     * never started never will (weft_blocking dropped it): its two
     * references are dropped here. */
    int idle = 0;
    if (atomic_compare_exchange_strong(&c->cstate, &idle, 2)) {
        WITH_STATE(c, c->connect_done = c->connect_failed = true);
        conn_unref(c);
        conn_unref(c);
    } else {
        WITH_STATE(c, {
            if (!c->connect_done)
                c->abandoned = true;
            else if (!c->connect_failed)
                c->close_req = true;
        });
    }
    conn_unref(c);
    return rc;
}

int weft_nats_close(weft_nats_conn *c, weft_time deadline)
{
    if (!c)
        return -EINVAL;
    atomic_store(&c->closing, 1);
    WITH_STATE(c, c->close_req = true);
    int rc = weft_future_await(c->ended, NULL, deadline);
    conn_unref(c);
    return rc;
}

/* ---- requests and the inbox ---- */

static pending **bucket(weft_nats_conn *c, uint64_t token)
{
    return &c->buckets[token % NBUCKETS];
}

/* Unlinks the request with this token; returns it, or NULL. Holding pmu. */
static pending *unlink_locked(weft_nats_conn *c, uint64_t token)
{
    for (pending **pp = bucket(c, token); *pp; pp = &(*pp)->next) {
        pending *p = *pp;
        if (p->token == token) {
            *pp = p->next;
            c->npending--;
            return p;
        }
    }
    return NULL;
}

/* Settles the request with this token: with msg (then the request owns
 * it), or with err when msg is NULL. A reply nobody waits for any more is
 * dropped and counted. When the request waits on a slot, the slot is
 * free again. */
static void settle(weft_nats_conn *c, uint64_t token, natsMsg *msg, int err)
{
    weft_future *f = NULL;
    pthread_mutex_lock(&c->pmu);
    pending *p = unlink_locked(c, token);
    if (p) { /* its waiter may leave once settled: hold f meanwhile */
        f = weft_future_ref(p->f);
        if (p->slot >= 0)
            c->slots[p->slot].token = 0;
    }
    pthread_mutex_unlock(&c->pmu);
    int rc = !f    ? -1
             : msg ? weft_future_resolve(f, &msg)
                   : weft_future_reject(f, err);
    if (rc != 0) {
        if (msg)
            natsMsg_Destroy(msg);
        atomic_fetch_add(&c->st_late, 1);
    }
    if (f)
        weft_future_unref(f);
}

/* A reply on the inbox (a request past the slots): to its request, or
 * dropped and counted. nats.c's delivery thread of the inbox. */
static void inbox_cb(natsConnection *nc, natsSubscription *sub, natsMsg *msg,
                     void *closure)
{
    (void)nc;
    (void)sub;
    weft_nats_conn *c = closure;
    const char *subj = natsMsg_GetSubject(msg);
    size_t n = strlen(c->inbox);
    uint64_t token = 0;
    if (strncmp(subj, c->inbox, n) == 0 && subj[n] == '.')
        token = strtoull(subj + n + 1, NULL, 10);
    settle(c, token, msg, 0);
}

/* One message of slot k (msg, or a "no responders" status when NULL):
 * to its request. The driver. */
static void slot_reply(weft_nats_conn *c, int k, natsMsg *msg)
{
    if (!msg) { /* the status of the request on the slot, if any: a
                 * dirty slot has none, and its status is dropped */
        pthread_mutex_lock(&c->pmu);
        uint64_t token = c->slots[k].token;
        pthread_mutex_unlock(&c->pmu);
        if (token)
            settle(c, token, NULL, -ESRCH);
        return;
    }
    const char *rest = strrchr(natsMsg_GetSubject(msg), '.');
    if (rest && strcmp(rest, ".m") == 0) { /* the marker: clean again */
        msg_release(c, msg);
        pthread_mutex_lock(&c->pmu);
        c->slots[k].dirty = false;
        pthread_mutex_unlock(&c->pmu);
        return;
    }
    settle(c, rest ? strtoull(rest + 1, NULL, 10) : 0, msg, 0);
}

/* Takes ns's next message without waiting: 1, with *m the message or
 * NULL for a "no responders" status (which NextMsg reports without its
 * message); 0 when there is none, or ns is over. */
static int next_msg(natsSubscription *ns, natsMsg **m)
{
    for (;;) {
        *m = NULL;
        natsStatus st = natsSubscription_NextMsg(m, ns, 0);
        if (st == NATS_SLOW_CONSUMER) /* said once; the message is next */
            continue;
        if (st == NATS_NO_RESPONDERS)
            *m = NULL;
        return st == NATS_OK || st == NATS_NO_RESPONDERS;
    }
}

/* After each read: the slots' replies to their requests. The driver. */
static void drain_slots(weft_nats_conn *c)
{
    int nslots = atomic_load(&c->nslots);
    for (int k = 0; k < nslots; k++) {
        int n = 0, bytes = 0;
        natsMsg *m;
        if (natsSubscription_GetPending(c->slots[k].ns, &n, &bytes) != NATS_OK)
            continue;
        for (int i = 0; i < n && next_msg(c->slots[k].ns, &m); i++)
            slot_reply(c, k, m);
    }
}

/* The inbox ended (the connection closed): requests still waiting fail
 * with -ENOTCONN, and new ones are refused. */
static void inbox_done(void *closure)
{
    weft_nats_conn *c = closure;
    pthread_mutex_lock(&c->pmu);
    c->inbox_closed = true;
    for (int i = 0; i < NBUCKETS; i++) {
        for (pending *p = c->buckets[i]; p; p = p->next)
            weft_future_reject(p->f, -ENOTCONN);
        c->buckets[i] = NULL;
    }
    c->npending = 0;
    pthread_mutex_unlock(&c->pmu);
    conn_unref(c);
}

/* Waits while nats.c's outgoing buffer holds more than max_buffered. */
static int wait_room(weft_nats_conn *c, weft_time deadline)
{
    if (natsConnection_Buffered(c->nc) <= (int64_t)c->max_buffered)
        return 0;
    int rc = weft_mutex_lock_until(&c->bmu, deadline);
    if (rc != 0)
        return rc;
    atomic_fetch_add(&c->bwaiters, 1);
    while (rc == 0 && !atomic_load(&c->closing) &&
           natsConnection_Buffered(c->nc) > (int64_t)c->max_buffered)
        rc = weft_cond_wait_until(&c->bcv, &c->bmu, deadline);
    atomic_fetch_sub(&c->bwaiters, 1);
    weft_mutex_unlock(&c->bmu);
    return rc;
}

/* What every publishing call checks first. */
static int usable(weft_nats_conn *c, weft_time deadline)
{
    if (weft_worker_id() < 0)
        return -EPERM;
    if (weft_cancelled())
        return -ECANCELED;
    if (atomic_load(&c->closing))
        return -ENOTCONN;
    return wait_room(c, deadline);
}

/* Publishes to subject with reply subject `to`, with the header
 * Nats-Msg-Id: key (JetStream's idempotency key) when key is not NULL. */
static natsStatus publish_request(weft_nats_conn *c, const char *subject,
                                  const char *to, const char *key,
                                  const void *data, size_t len)
{
    if (!key)
        return natsConnection_PublishRequest(c->nc, subject, to, data,
                                             (int)len);
    natsMsg *m = NULL;
    natsStatus st = natsMsg_Create(&m, subject, to, data, (int)len);
    if (st == NATS_OK)
        st = natsMsgHeader_Set(m, "Nats-Msg-Id", key);
    if (st == NATS_OK)
        st = natsConnection_PublishMsg(c->nc, m);
    natsMsg_Destroy(m);
    return st;
}

/* Puts p in the request table, on a free slot if there is one, and
 * writes its reply subject into to. Returns 0 or -ENOTCONN. */
static int enlist(weft_nats_conn *c, pending *p, char *to, size_t n)
{
    pthread_mutex_lock(&c->pmu);
    if (c->inbox_closed) {
        pthread_mutex_unlock(&c->pmu);
        return -ENOTCONN;
    }
    int nslots = atomic_load(&c->nslots);
    for (int k = 0; k < nslots && p->slot < 0; k++)
        if (!c->slots[k].token && !c->slots[k].dirty) {
            c->slots[k].token = p->token;
            p->slot = k;
        }
    p->next = *bucket(c, p->token);
    *bucket(c, p->token) = p;
    c->npending++;
    pthread_mutex_unlock(&c->pmu);
    if (p->slot >= 0)
        snprintf(to, n, "%s.s%d.%" PRIu64, c->inbox, p->slot, p->token);
    else
        snprintf(to, n, "%s.%" PRIu64, c->inbox, p->token);
    return 0;
}

/* The request p is given up (an error, a deadline, a cancel): out of the
 * table, and its slot dirty until the marker sent now comes back, since
 * what it still gets may come there. A reply that came just as it gave
 * up is dropped and counted. */
static void give_up(weft_nats_conn *c, pending *p)
{
    pthread_mutex_lock(&c->pmu);
    bool mine = unlink_locked(c, p->token) != NULL;
    bool dirty = mine && p->slot >= 0;
    if (dirty) {
        c->slots[p->slot].token = 0;
        c->slots[p->slot].dirty = true;
    }
    pthread_mutex_unlock(&c->pmu);
    natsMsg *m = NULL;
    if (!mine && weft_future_try_await(p->f, &m) == 0) {
        natsMsg_Destroy(m);
        atomic_fetch_add(&c->st_late, 1);
    }
    if (dirty) {
        char mark[sizeof c->inbox + 32];
        snprintf(mark, sizeof mark, "%s.s%d.m", c->inbox, p->slot);
        natsConnection_Publish(c->nc, mark, NULL, 0);
    }
}

/* Sends to subject (NULL: a flush marker to the inbox itself) with a
 * reply subject of the inbox, and waits for what comes back there. */
static int round_trip(weft_nats_conn *c, const char *subject, const char *key,
                      const void *data, size_t len, natsMsg **reply,
                      weft_time deadline)
{
    int rc = usable(c, deadline);
    if (rc != 0)
        return rc;
    if (len > INT32_MAX)
        return -EMSGSIZE;
    pending p = {.token = atomic_fetch_add(&c->next_token, 1) + 1, .slot = -1};
    if ((rc = weft_future_new(&p.f, sizeof(natsMsg *))) != 0)
        return rc;
    char to[sizeof c->inbox + 32];
    if ((rc = enlist(c, &p, to, sizeof to)) != 0) {
        weft_future_unref(p.f);
        return rc;
    }
    natsStatus st = subject ? publish_request(c, subject, to, key, data, len)
                            : natsConnection_Publish(c->nc, to, NULL, 0);
    natsMsg *m = NULL;
    rc = st == NATS_OK ? weft_future_await(p.f, &m, deadline)
                       : weft_nats_error(st);
    if (rc != 0)
        give_up(c, &p);
    weft_future_unref(p.f);
    if (rc == 0 && natsMsg_IsNoResponders(m)) {
        natsMsg_Destroy(m);
        return -ESRCH;
    }
    if (rc == 0)
        *reply = m;
    return rc;
}

int weft_nats_request(weft_nats_conn *c, const char *subject, const void *data,
                      size_t len, natsMsg **reply, weft_time deadline)
{
    if (!c || !subject || !reply || (!data && len))
        return -EINVAL;
    *reply = NULL;
    return round_trip(c, subject, NULL, data, len, reply, deadline);
}

int weft_nats_flush(weft_nats_conn *c, weft_time deadline)
{
    if (!c)
        return -EINVAL;
    natsMsg *m = NULL;
    int rc = round_trip(c, NULL, NULL, NULL, 0, &m, deadline);
    if (rc == 0)
        msg_release(c, m);
    return rc;
}

int weft_nats_publish(weft_nats_conn *c, const char *subject, const void *data,
                      size_t len, weft_time deadline)
{
    if (!c || !subject || (!data && len))
        return -EINVAL;
    if (len > INT32_MAX)
        return -EMSGSIZE;
    int rc = usable(c, deadline);
    if (rc != 0)
        return rc;
    return weft_nats_error(
        natsConnection_Publish(c->nc, subject, data, (int)len));
}

int weft_nats_event_recv(weft_nats_conn *c, weft_nats_event *ev,
                         weft_time deadline)
{
    if (!c || !ev)
        return -EINVAL;
    return weft_chan_recv_until(c->events, ev, deadline);
}

int weft_nats_conn_stats_get(weft_nats_conn *c, weft_nats_conn_stats *out)
{
    if (!c || !out)
        return -EINVAL;
    *out = (weft_nats_conn_stats){
        .attaches = atomic_load(&c->st_attaches),
        .disconnects = atomic_load(&c->st_disconnects),
        .reconnects = atomic_load(&c->st_reconnects),
        .slow_consumers = atomic_load(&c->st_slow),
        .errors = atomic_load(&c->st_errors),
        .events_dropped = atomic_load(&c->st_events_dropped),
        .late_replies = atomic_load(&c->st_late),
        .read_events = atomic_load(&c->st_reads),
        .write_events = atomic_load(&c->st_writes),
    };
    pthread_mutex_lock(&c->pmu);
    out->requests_waiting = c->npending;
    pthread_mutex_unlock(&c->pmu);
    out->connected = c->nc && !atomic_load(&c->closing) &&
                     natsConnection_Status(c->nc) == NATS_CONN_STATUS_CONNECTED;
    return 0;
}

/* ---- subscriptions ---- */

static void sub_unref(weft_nats_sub *s)
{
    if (atomic_fetch_sub(&s->refs, 1) != 1)
        return;
    while (s->len) {
        natsMsg_Destroy(s->ring[s->head]);
        s->head = (s->head + 1) % s->cap;
        s->len--;
    }
    if (s->ns)
        natsSubscription_Destroy(s->ns);
    conn_unref(s->c);
    pthread_mutex_destroy(&s->mu);
    free(s->ring);
    free(s);
}

/* Takes s out of its connection's list; returns whether it was in it
 * (and so whether the list's reference is the caller's now). Holding
 * c->smu. */
static bool sub_unlink_locked(weft_nats_sub *s)
{
    if (!s->linked)
        return false;
    weft_nats_sub **pp = &s->c->subs;
    while (*pp != s)
        pp = &(*pp)->next;
    *pp = s->next;
    s->linked = false;
    return true;
}

/* A "no responders" status (503), which nats.c's NextMsg reports
 * without the message: made again, so that the receiver sees it as it
 * would from an asynchronous subscription (an empty message with a
 * Status header), on the subscription's subject. */
static natsMsg *no_responders(weft_nats_sub *s)
{
    natsMsg *m = NULL;
    if (natsMsg_Create(&m, natsSubscription_GetSubject(s->ns), NULL, NULL, 0) !=
        NATS_OK)
        return NULL;
    if (natsMsgHeader_Set(m, "Status", "503") != NATS_OK) {
        natsMsg_Destroy(m);
        return NULL;
    }
    return m;
}

/* Moves s's messages from nats.c's list into its ring while there is
 * room, in order (the driver alone pushes). A ring that fills with
 * messages left behind is starved: its next receiver asks the driver
 * for more (drain_req), and meanwhile nats.c's list grows up to its
 * pending limits, then drops (slow consumer, counted). Returns false
 * once nats.c says the subscription is over (its connection closed).
 * The driver, holding c->smu. */
static bool sub_drain(weft_nats_sub *s)
{
    int n = 0, bytes = 0;
    if (natsSubscription_GetPending(s->ns, &n, &bytes) != NATS_OK)
        return false;
    if (n == 0)
        return true;
    pthread_mutex_lock(&s->mu);
    size_t room = s->cap - s->len;
    pthread_mutex_unlock(&s->mu);
    long pushed = 0;
    natsMsg *m;
    for (size_t i = 0; i < room && i < (size_t)n && next_msg(s->ns, &m); i++) {
        if (!m && !(m = no_responders(s)))
            continue;
        pthread_mutex_lock(&s->mu);
        s->ring[(s->head + s->len) % s->cap] = m;
        s->len++;
        pthread_mutex_unlock(&s->mu);
        pushed++;
    }
    if (pushed)
        weft_sem_release(&s->items, pushed);
    if (room < (size_t)n) {
        pthread_mutex_lock(&s->mu);
        if (!s->starved) {
            s->starved = true;
            s->full_waits++;
        }
        pthread_mutex_unlock(&s->mu);
    }
    return true;
}

/* After each read: every subscription's new messages into its ring. A
 * subscription nats.c has ended is taken out of the list, and its
 * receivers get -EPIPE once they have taken what is queued. */
static void drain_subs(weft_nats_conn *c)
{
    pthread_mutex_lock(&c->smu);
    for (weft_nats_sub **pp = &c->subs; *pp;) {
        weft_nats_sub *s = *pp;
        if (sub_drain(s)) {
            pp = &s->next;
            continue;
        }
        sub_unlink_locked(s);
        weft_sem_release(&s->items, 1);
        sub_unref(s);
    }
    pthread_mutex_unlock(&c->smu);
}

/* The driver's end: every subscription ends (and no new one starts). */
static void end_subs(weft_nats_conn *c)
{
    pthread_mutex_lock(&c->smu);
    c->subs_ended = true;
    while (c->subs) {
        weft_nats_sub *s = c->subs;
        sub_unlink_locked(s);
        weft_sem_release(&s->items, 1);
        sub_unref(s);
    }
    pthread_mutex_unlock(&c->smu);
}

static int sub_make(weft_nats_conn *c, const char *subject,
                    const weft_nats_sub_opts *o, weft_nats_sub **out)
{
    weft_nats_sub *s = calloc(1, sizeof *s);
    size_t cap = o->capacity ? o->capacity : DEFAULT_CAPACITY;
    if (!s || !(s->ring = calloc(cap, sizeof *s->ring))) {
        free(s);
        return -ENOMEM;
    }
    atomic_init(&s->refs, 1);
    s->cap = cap;
    s->c = c;
    conn_ref(c);
    pthread_mutex_init(&s->mu, NULL);
    weft_sem_init(&s->items, 0);
    natsStatus st = o->queue
                        ? natsConnection_QueueSubscribeSync(&s->ns, c->nc,
                                                            subject, o->queue)
                        : natsConnection_SubscribeSync(&s->ns, c->nc, subject);
    if (st == NATS_OK && (o->pending_msgs || o->pending_bytes)) {
        int pm = 0, pb = 0;
        natsSubscription_GetPendingLimits(s->ns, &pm, &pb);
        st = natsSubscription_SetPendingLimits(
            s->ns, o->pending_msgs ? o->pending_msgs : pm,
            o->pending_bytes ? o->pending_bytes : pb);
    }
    if (st == NATS_OK) {
        pthread_mutex_lock(&c->smu);
        if (c->subs_ended) {
            st = NATS_CONNECTION_CLOSED;
        } else { /* the list's reference */
            atomic_fetch_add(&s->refs, 1);
            s->linked = true;
            s->next = c->subs;
            c->subs = s;
        }
        pthread_mutex_unlock(&c->smu);
    }
    if (st != NATS_OK) {
        if (s->ns)
            natsSubscription_Unsubscribe(s->ns);
        sub_unref(s);
        return weft_nats_error(st);
    }
    /* What came before the driver saw s in its list: drained at once. */
    atomic_store(&c->drain_req, 1);
    wake(c);
    *out = s;
    return 0;
}

int weft_nats_subscribe(weft_nats_conn *c, const char *subject,
                        const weft_nats_sub_opts *o, weft_nats_sub **out,
                        weft_time deadline)
{
    weft_nats_sub_opts none = {0};
    if (!c || !subject || !out)
        return -EINVAL;
    *out = NULL;
    int rc = usable(c, deadline);
    if (rc != 0)
        return rc;
    weft_nats_sub *s = NULL;
    if ((rc = sub_make(c, subject, o ? o : &none, &s)) != 0)
        return rc;
    if ((rc = weft_nats_flush(c, deadline)) != 0) {
        weft_nats_sub_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

int weft_nats_sub_recv(weft_nats_sub *s, natsMsg **msg, weft_time deadline)
{
    if (!s || !msg)
        return -EINVAL;
    int rc = weft_sem_acquire_until(&s->items, 1, deadline);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&s->mu);
    if (s->len == 0) { /* the end's permit: leave it for the others */
        pthread_mutex_unlock(&s->mu);
        weft_sem_release(&s->items, 1);
        return -EPIPE;
    }
    *msg = s->ring[s->head];
    s->head = (s->head + 1) % s->cap;
    s->len--;
    s->taken++;
    bool starved = s->starved && s->len <= s->cap / 2;
    if (starved)
        s->starved = false;
    pthread_mutex_unlock(&s->mu);
    if (starved) {
        atomic_store(&s->c->drain_req, 1);
        wake(s->c);
    }
    return 0;
}

int weft_nats_sub_free(weft_nats_sub *s)
{
    if (!s)
        return -EINVAL;
    weft_nats_conn *c = s->c;
    pthread_mutex_lock(&c->smu);
    bool was = sub_unlink_locked(s);
    pthread_mutex_unlock(&c->smu);
    natsSubscription_Unsubscribe(s->ns);
    if (was)
        sub_unref(s);
    sub_unref(s);
    return 0;
}

/* Holding c->smu, which the driver holds while it moves messages from
 * nats.c's list into the queue: each message is counted once, in the
 * queue or in nats.c's pending. */
int weft_nats_sub_stats_get(weft_nats_sub *s, weft_nats_sub_stats *out)
{
    if (!s || !out)
        return -EINVAL;
    pthread_mutex_lock(&s->c->smu);
    int npend = 0, bytes = 0;
    int64_t dropped = 0;
    bool live = natsSubscription_GetPending(s->ns, &npend, &bytes) == NATS_OK &&
                natsSubscription_GetDropped(s->ns, &dropped) == NATS_OK;
    pthread_mutex_lock(&s->mu);
    if (live && dropped > s->last_dropped)
        s->last_dropped = dropped;
    *out = (weft_nats_sub_stats){
        .received = s->taken + s->len,
        .taken = s->taken,
        .queued = s->len,
        .capacity = s->cap,
        .full_waits = s->full_waits,
        .producer_waiting = s->starved,
        .pending = live ? npend : 0,
        .dropped = s->last_dropped,
    };
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_unlock(&s->c->smu);
    return 0;
}

/* ---- remote actors ----
 *
 * An export is a subscription to the actor's subject and a server task
 * that takes its messages in order: a tell is handed to weft_actor_tell
 * by the server itself (so tells keep their order), an ask to a task of
 * its own (at most max_asks at once) that waits in weft_actor_ask and
 * publishes the reply. On the wire a message is one byte of kind ('T' or
 * 'A'), eight bytes of the time its sender lets it take (little-endian
 * nanoseconds, INT64_MAX: no limit), then the actor's msg_size bytes; a
 * reply is four bytes of status (little-endian, 0 or a negative errno),
 * then reply_size bytes when the status is 0. */

#define WIRE_HEAD 9
#define REPLY_HEAD 4

struct weft_nats_export {
    weft_nats_conn *c;
    weft_actor *a;      /* a reference of the export's own */
    weft_nats_sub *sub; /* the actor's subject */
    weft_nats_ref ref;  /* under which it is exported */
    size_t msg_size, reply_size;
    weft_sem asks; /* a permit per ask that may be handled now */
    weft_task_handle server;
    weft_future *down;         /* the actor's exit status (a local monitor) */
    weft_task_handle notifier; /* publishes the exit on the down subject */
};

/* An ask being handled: the task owns the message. */
typedef struct remote_ask {
    weft_nats_export *e;
    natsMsg *m;
} remote_ask;

static _Atomic uint64_t next_export_id;

static void put_le(unsigned char *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static bool node_ok(const char *node)
{
    size_t n = node ? strlen(node) : 0;
    if (n == 0 || n >= sizeof(((weft_nats_ref *)0)->node))
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = node[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
              (ch >= '0' && ch <= '9') || ch == '-' || ch == '_'))
            return false;
    }
    return true;
}

int weft_nats_ref_format(const weft_nats_ref *r, char *buf, size_t n)
{
    if (!r || !buf || !node_ok(r->node))
        return -EINVAL;
    int k = snprintf(buf, n, "%s.%" PRIu64 ".%" PRIu64, r->node, r->id,
                     r->incarnation);
    return k < 0 ? -EINVAL : (size_t)k >= n ? -ENOSPC : k;
}

int weft_nats_ref_parse(weft_nats_ref *r, const char *text)
{
    if (!r || !text)
        return -EINVAL;
    weft_nats_ref t;
    memset(&t, 0, sizeof t);
    const char *dot = strchr(text, '.');
    if (!dot || (size_t)(dot - text) >= sizeof t.node)
        return -EINVAL;
    memcpy(t.node, text, (size_t)(dot - text));
    char *end;
    errno = 0;
    t.id = strtoull(dot + 1, &end, 10);
    if (*end != '.' || errno)
        return -EINVAL;
    t.incarnation = strtoull(end + 1, &end, 10);
    if (*end || errno || !node_ok(t.node))
        return -EINVAL;
    *r = t;
    return 0;
}

/* The subject prefix followed by r's text form: "weft.actor." for its
 * messages, "weft.down." for its exit notice. */
static int ref_subject_of(const char *prefix, const weft_nats_ref *r, char *buf,
                          size_t n)
{
    size_t p = strlen(prefix);
    if (n <= p)
        return -ENOSPC;
    memcpy(buf, prefix, p + 1);
    int k = weft_nats_ref_format(r, buf + p, n - p);
    return k < 0 ? k : 0;
}

static int ref_subject(const weft_nats_ref *r, char *buf, size_t n)
{
    return ref_subject_of("weft.actor.", r, buf, n);
}

/* The deadline a message carries, as time left, and back. */
static int64_t time_left(weft_time deadline)
{
    if (deadline == WEFT_NEVER)
        return INT64_MAX;
    int64_t left = deadline - weft_now();
    return left < 0 ? 0 : left;
}

static weft_time deadline_of(int64_t left)
{
    if (left == INT64_MAX || left < 0)
        return WEFT_NEVER;
    weft_time now = weft_now();
    return left > WEFT_NEVER - now ? WEFT_NEVER : now + left;
}

/* Cancels task t and waits for its end, in a shielded scope so that a
 * caller being cancelled still waits. */
static void stop_task(weft_task_handle t)
{
    weft_scope *shield = NULL;
    weft_scope_opts so = {.shield = 1};
    bool shielded = weft_scope_open(&shield, &so) == 0;
    weft_task_cancel(t);
    weft_task_join(t, NULL);
    if (shielded) {
        weft_scope_join(shield);
        weft_scope_free(shield);
    }
}

/* Handles one ask on a task of its own, and replies. */
static int ask_task(void *arg)
{
    remote_ask *q = arg;
    weft_nats_export *e = q->e;
    const unsigned char *d = (const unsigned char *)natsMsg_GetData(q->m);
    unsigned char *out = calloc(1, REPLY_HEAD + e->reply_size);
    int st = -ENOMEM;
    if (out)
        st = weft_actor_ask(e->a, d + WIRE_HEAD, out + REPLY_HEAD,
                            deadline_of((int64_t)get_le(d + 1, 8)));
    if (out && natsMsg_GetReply(q->m)) {
        put_le(out, (uint64_t)(uint32_t)st, REPLY_HEAD);
        weft_nats_publish(e->c, natsMsg_GetReply(q->m), out,
                          REPLY_HEAD + (st == 0 ? e->reply_size : 0),
                          WEFT_NEVER);
    }
    free(out);
    msg_release(e->c, q->m);
    free(q);
    weft_sem_release(&e->asks, 1);
    return 0;
}

/* A monitor's heartbeat ('P', no body): answers 'L' (alive) or 'X' and
 * the actor's exit status, four bytes. */
#define BEAT_REPLY (1 + REPLY_HEAD)

static void answer_beat(weft_nats_export *e, natsMsg *m)
{
    unsigned char b[BEAT_REPLY];
    int st = 0;
    int rc = weft_future_try_await(e->down, &st);
    b[0] = rc == -EINPROGRESS ? 'L' : 'X';
    put_le(b + 1, (uint64_t)(uint32_t)(rc == 0 ? st : rc), REPLY_HEAD);
    if (natsMsg_GetReply(m))
        weft_nats_publish(e->c, natsMsg_GetReply(m), b, sizeof b, WEFT_NEVER);
    natsMsg_Destroy(m);
}

/* Publishes the actor's exit status on its down subject when it exits:
 * the monitors of its reference learn it at once. */
static int export_notifier(void *arg)
{
    weft_nats_export *e = arg;
    int st = 0;
    int rc = weft_future_await(e->down, &st, WEFT_NEVER);
    if (rc == -ECANCELED)
        return 0;
    char subj[128];
    unsigned char b[REPLY_HEAD];
    put_le(b, (uint64_t)(uint32_t)(rc == 0 ? st : rc), REPLY_HEAD);
    if (ref_subject_of("weft.down.", &e->ref, subj, sizeof subj) == 0)
        weft_nats_publish(e->c, subj, b, sizeof b, WEFT_NEVER);
    return 0;
}

/* Takes one message: a tell to the actor now, an ask to a task, a
 * heartbeat answered now. Returns 0, or -ECANCELED when the server is
 * stopping. */
static int serve_one(weft_nats_export *e, weft_scope *asks, natsMsg *m)
{
    const unsigned char *d = (const unsigned char *)natsMsg_GetData(m);
    if (natsMsg_GetDataLength(m) == WIRE_HEAD && d[0] == 'P') {
        answer_beat(e, m);
        return 0;
    }
    if ((size_t)natsMsg_GetDataLength(m) != WIRE_HEAD + e->msg_size ||
        (d[0] != 'T' && d[0] != 'A')) {
        natsMsg_Destroy(m); /* not ours: dropped */
        return 0;
    }
    weft_time deadline = deadline_of((int64_t)get_le(d + 1, 8));
    if (d[0] == 'T') { /* at most once: a tell that fails is dropped */
        int rc = weft_actor_tell(e->a, d + WIRE_HEAD, deadline);
        msg_release(e->c, m);
        return rc == -ECANCELED ? rc : 0;
    }
    remote_ask *q = malloc(sizeof *q);
    int rc = q ? weft_sem_acquire(&e->asks, 1) : -ENOMEM;
    if (rc == 0) {
        *q = (remote_ask){.e = e, .m = m};
        rc = weft_spawn(asks, ask_task, q);
        if (rc >= 0)
            return 0;
        weft_sem_release(&e->asks, 1);
    }
    free(q);
    natsMsg_Destroy(m); /* its asker learns nothing: outcome unknown */
    return rc == -ECANCELED ? rc : 0;
}

/* The export's server: runs until weft_nats_export_free cancels it (or
 * the subscription ends with its connection), then waits for its asks. */
static int export_server(void *arg)
{
    weft_nats_export *e = arg;
    weft_scope *asks;
    int rc = weft_scope_open(&asks, NULL);
    if (rc != 0)
        return rc;
    natsMsg *m;
    while (weft_nats_sub_recv(e->sub, &m, WEFT_NEVER) == 0 &&
           serve_one(e, asks, m) == 0) {
    }
    weft_scope_cancel(asks);
    weft_scope_join(asks);
    weft_scope_free(asks);
    return 0;
}

int weft_nats_export_new(weft_nats_export **out, weft_nats_conn *c,
                         weft_actor *a, const weft_nats_export_opts *o,
                         weft_time deadline)
{
    if (!out)
        return -EINVAL;
    *out = NULL;
    if (!c || !a || !o || !node_ok(o->node) || o->msg_size == 0 ||
        o->msg_size > 65536 || o->reply_size > 65536)
        return -EINVAL;
    weft_nats_export *e = calloc(1, sizeof *e);
    if (!e)
        return -ENOMEM;
    e->c = c;
    e->msg_size = o->msg_size;
    e->reply_size = o->reply_size;
    weft_sem_init(&e->asks, o->max_asks > 0 ? o->max_asks : 64);
    snprintf(e->ref.node, sizeof e->ref.node, "%s", o->node);
    e->ref.id = atomic_fetch_add(&next_export_id, 1) + 1;
    if (getrandom(&e->ref.incarnation, sizeof e->ref.incarnation, 0) !=
        sizeof e->ref.incarnation)
        e->ref.incarnation = (uint64_t)weft_now() ^ ((uint64_t)getpid() << 32);
    char subj[128];
    int rc = ref_subject(&e->ref, subj, sizeof subj);
    if (rc == 0)
        rc = weft_nats_subscribe(c, subj, NULL, &e->sub, deadline);
    if (rc != 0) {
        free(e);
        return rc;
    }
    e->a = weft_actor_ref(a);
    rc = weft_actor_monitor_future(a, &e->down);
    if (rc == 0)
        rc = weft_spawn_ex(o->scope, export_notifier, e,
                           &(weft_spawn_opts){.name = "nats export down",
                                              .handle = &e->notifier});
    if (rc >= 0) {
        rc = weft_spawn_ex(
            o->scope, export_server, e,
            &(weft_spawn_opts){.name = "nats export", .handle = &e->server});
        if (rc < 0)
            stop_task(e->notifier);
    }
    if (rc < 0) {
        if (e->down)
            weft_future_unref(e->down);
        weft_nats_sub_free(e->sub);
        weft_actor_unref(e->a);
        free(e);
        return rc;
    }
    *out = e;
    return 0;
}

int weft_nats_export_ref(const weft_nats_export *e, weft_nats_ref *out)
{
    if (!e || !out)
        return -EINVAL;
    *out = e->ref;
    return 0;
}

int weft_nats_export_free(weft_nats_export *e)
{
    if (!e)
        return -EINVAL;
    stop_task(e->server);
    stop_task(e->notifier);
    weft_future_unref(e->down);
    weft_nats_sub_free(e->sub);
    weft_actor_unref(e->a);
    free(e);
    return 0;
}

/* Sends a tell or an ask to r's subject: the wire form above. */
static int remote_send(weft_nats_conn *c, const weft_nats_ref *r, char kind,
                       const void *msg, size_t len, natsMsg **reply,
                       weft_time deadline)
{
    char subj[128];
    int rc = ref_subject(r, subj, sizeof subj);
    if (rc != 0)
        return rc == -ENOSPC ? -EINVAL : rc;
    if (len > 65536)
        return -EMSGSIZE;
    unsigned char *buf = malloc(WIRE_HEAD + len);
    if (!buf)
        return -ENOMEM;
    buf[0] = (unsigned char)kind;
    put_le(buf + 1, (uint64_t)time_left(deadline), 8);
    if (len)
        memcpy(buf + WIRE_HEAD, msg, len);
    rc =
        kind == 'T'
            ? weft_nats_publish(c, subj, buf, WIRE_HEAD + len, deadline)
            : weft_nats_request(c, subj, buf, WIRE_HEAD + len, reply, deadline);
    free(buf);
    return rc;
}

int weft_nats_tell(weft_nats_conn *c, const weft_nats_ref *r, const void *msg,
                   size_t len, weft_time deadline)
{
    if (!c || !r || !msg || !len)
        return -EINVAL;
    return remote_send(c, r, 'T', msg, len, NULL, deadline);
}

int weft_nats_ask(weft_nats_conn *c, const weft_nats_ref *r, const void *msg,
                  size_t len, void *reply, size_t reply_len, weft_time deadline)
{
    if (!c || !r || !msg || !len || (!reply && reply_len))
        return -EINVAL;
    natsMsg *m = NULL;
    int rc = remote_send(c, r, 'A', msg, len, &m, deadline);
    if (rc == -ETIMEDOUT)
        return WEFT_NATS_OUTCOME_UNKNOWN;
    if (rc != 0)
        return rc;
    const unsigned char *d = (const unsigned char *)natsMsg_GetData(m);
    size_t n = (size_t)natsMsg_GetDataLength(m);
    if (n < REPLY_HEAD) {
        rc = -EBADMSG;
    } else {
        rc = (int)(int32_t)(uint32_t)get_le(d, REPLY_HEAD);
        if (rc == -ETIMEDOUT) /* it may still be queued there, and run */
            rc = WEFT_NATS_OUTCOME_UNKNOWN;
        else if (rc == 0 && n - REPLY_HEAD > reply_len)
            rc = -EMSGSIZE;
        else if (rc == 0 && reply)
            memcpy(reply, d + REPLY_HEAD, n - REPLY_HEAD);
    }
    msg_release(c, m);
    return rc;
}

/* ---- remote monitors ----
 *
 * A monitor is a subscription to the reference's down subject (the
 * exporter's notice of its actor's exit: four bytes of status) and a task
 * that sends a heartbeat request ('P') every interval and waits on that
 * subscription between beats. The notice is a future of a weft_nats_down,
 * resolved once by the task, which then ends. */

#define MONITOR_INTERVAL WEFT_SEC
#define MONITOR_TIMEOUT (5 * WEFT_SEC)

struct weft_nats_monitor {
    weft_nats_conn *c;
    weft_nats_ref ref;
    weft_nats_sub *sub;  /* the down subject */
    weft_future *notice; /* a weft_nats_down */
    int64_t interval, timeout;
    weft_task_handle task;
};

static int32_t status_of(const unsigned char *p)
{
    return (int32_t)(uint32_t)get_le(p, REPLY_HEAD);
}

/* Whether the connection has stayed connected since the snapshot of its
 * disconnects was taken. */
static bool stayed_connected(weft_nats_conn *c, uint64_t disconnects)
{
    weft_nats_conn_stats cs;
    return weft_nats_conn_stats_get(c, &cs) == 0 && cs.connected &&
           cs.disconnects == disconnects;
}

static uint64_t disconnects_now(weft_nats_conn *c)
{
    return atomic_load(&c->st_disconnects);
}

/* One heartbeat, answered by `until`. Returns 1 (alive: *ok moved on), 0
 * (a missed beat), -ECANCELED, or 2 with *d filled (down). */
static int beat(weft_nats_monitor *m, weft_time until, weft_time *ok,
                uint64_t *disc, weft_nats_down *d)
{
    natsMsg *r = NULL;
    int rc = remote_send(m->c, &m->ref, 'P', NULL, 0, &r, until);
    if (rc == -ECANCELED)
        return rc;
    if (rc == -ENOTCONN || (rc == -ESRCH && stayed_connected(m->c, *disc))) {
        d->kind = WEFT_NATS_DOWN_UNREACHABLE;
        d->status = rc;
        return 2;
    }
    if (rc != 0)
        return 0; /* no answer in time, or a no responder just after a
                   * disconnect: the exporter may be reconnecting */
    const unsigned char *b = (const unsigned char *)natsMsg_GetData(r);
    int n = natsMsg_GetDataLength(r);
    int res = 0;
    if (n == BEAT_REPLY && b[0] == 'X') {
        d->kind = WEFT_NATS_DOWN_EXITED;
        d->status = status_of(b + 1);
        res = 2;
    } else if (n == BEAT_REPLY && b[0] == 'L') {
        *ok = weft_now();
        *disc = disconnects_now(m->c);
        res = 1;
    }
    natsMsg_Destroy(r);
    return res;
}

static int monitor_task(void *arg)
{
    weft_nats_monitor *m = arg;
    weft_nats_down d = {.ref = m->ref};
    weft_time ok = weft_now(); /* the last answered beat; first: the start */
    uint64_t disc = disconnects_now(m->c);
    for (;;) {
        weft_time start = weft_now();
        weft_time lost = ok + m->timeout;
        if (start >= lost) {
            d.kind = WEFT_NATS_DOWN_UNREACHABLE;
            d.status = -ETIMEDOUT;
            break;
        }
        weft_time next =
            start + m->interval < lost ? start + m->interval : lost;
        int rc = beat(m, next, &ok, &disc, &d);
        if (rc == -ECANCELED)
            return 0;
        if (rc == 2)
            break;
        /* Until the next beat, an exit notice. */
        natsMsg *x = NULL;
        rc = weft_nats_sub_recv(m->sub, &x, next);
        if (rc == -ECANCELED)
            return 0;
        if (rc == -EPIPE) { /* the connection closed */
            d.kind = WEFT_NATS_DOWN_UNREACHABLE;
            d.status = -ENOTCONN;
            break;
        }
        if (rc == 0) {
            bool notice = natsMsg_GetDataLength(x) == REPLY_HEAD;
            if (notice) {
                d.kind = WEFT_NATS_DOWN_EXITED;
                d.status = status_of((const unsigned char *)natsMsg_GetData(x));
            }
            natsMsg_Destroy(x);
            if (notice)
                break;
        }
    }
    weft_future_resolve(m->notice, &d);
    return 0;
}

int weft_nats_monitor_new(weft_nats_monitor **out, weft_nats_conn *c,
                          const weft_nats_ref *r,
                          const weft_nats_monitor_opts *o, weft_time deadline)
{
    if (!out)
        return -EINVAL;
    *out = NULL;
    weft_nats_monitor_opts none = {0};
    if (!o)
        o = &none;
    if (!c || !r || !node_ok(r->node) || o->interval_ns < 0 ||
        o->timeout_ns < 0)
        return -EINVAL;
    int64_t interval = o->interval_ns ? o->interval_ns : MONITOR_INTERVAL;
    int64_t timeout = o->timeout_ns ? o->timeout_ns : MONITOR_TIMEOUT;
    if (timeout < interval)
        return -EINVAL;
    char subj[128];
    int rc = ref_subject_of("weft.down.", r, subj, sizeof subj);
    if (rc != 0)
        return -EINVAL;
    weft_nats_monitor *m = calloc(1, sizeof *m);
    if (!m)
        return -ENOMEM;
    *m = (weft_nats_monitor){
        .c = c, .ref = *r, .interval = interval, .timeout = timeout};
    rc = weft_future_new(&m->notice, sizeof(weft_nats_down));
    if (rc == 0)
        rc = weft_nats_subscribe(c, subj, NULL, &m->sub, deadline);
    if (rc == 0)
        rc = weft_spawn_ex(
            o->scope, monitor_task, m,
            &(weft_spawn_opts){.name = "nats monitor", .handle = &m->task});
    if (rc < 0) {
        if (m->sub)
            weft_nats_sub_free(m->sub);
        if (m->notice)
            weft_future_unref(m->notice);
        free(m);
        return rc;
    }
    *out = m;
    return 0;
}

int weft_nats_monitor_recv(weft_nats_monitor *m, weft_nats_down *down,
                           weft_time deadline)
{
    if (!m || !down)
        return -EINVAL;
    if (weft_worker_id() < 0)
        return -EPERM;
    return weft_future_await(m->notice, down, deadline);
}

int weft_nats_monitor_free(weft_nats_monitor *m)
{
    if (!m)
        return -EINVAL;
    stop_task(m->task);
    weft_nats_sub_free(m->sub);
    weft_future_unref(m->notice);
    free(m);
    return 0;
}

/* ---- work queues on JetStream ----
 *
 * All of it is core NATS requests to JetStream's API, so nothing blocks a
 * worker: the stream and the consumer are made with requests to
 * $JS.API.STREAM.CREATE and $JS.API.CONSUMER.DURABLE.CREATE; a take
 * publishes a pull request for one job ($JS.API.CONSUMER.MSG.NEXT) with
 * the handle's own inbox as its reply subject, and the job (or a status:
 * 408 when the request expired) arrives on the handle's subscription to
 * that inbox; an ack is a request to the job's reply subject ("+ACK",
 * which JetStream confirms), a nak a publish ("-NAK" with its delay). */

#define PULL_EXPIRES (5 * WEFT_SEC) /* a pull request's life, at most */
#define DEFAULT_IN_FLIGHT 64

struct weft_nats_queue {
    weft_nats_conn *c;
    weft_nats_sub *sub; /* jobs and statuses for this handle's pulls */
    weft_sem slots;     /* a permit per job that may be held now */
    char inbox[64];     /* the pulls' reply subject */
    char subject[128];  /* the jobs' */
    char next[256];     /* $JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer> */
};

static bool name_ok(const char *s, size_t max)
{
    return s && strlen(s) < max && node_ok(s);
}

/* The error code of a JetStream API reply ({"error":{"code":...,
 * "err_code":...}}), 0 if it reports none. */
static int js_error(natsMsg *m, int *err_code)
{
    int n = natsMsg_GetDataLength(m);
    char buf[1024];
    if (n >= (int)sizeof buf)
        n = sizeof buf - 1;
    memcpy(buf, natsMsg_GetData(m), (size_t)(n > 0 ? n : 0));
    buf[n > 0 ? n : 0] = 0;
    const char *e = strstr(buf, "\"error\"");
    *err_code = 0;
    if (!e)
        return 0;
    const char *ec = strstr(e, "\"err_code\":");
    if (ec)
        *err_code = atoi(ec + strlen("\"err_code\":"));
    const char *code = strstr(e, "\"code\":");
    int k = code ? atoi(code + strlen("\"code\":")) : 500;
    return k ? k : 500;
}

/* A JetStream API request; the error it reports, mapped. */
static int js_api(weft_nats_conn *c, const char *subject, const char *body,
                  int exists_code, weft_time deadline)
{
    natsMsg *r = NULL;
    int rc = weft_nats_request(c, subject, body, strlen(body), &r, deadline);
    if (rc != 0)
        return rc;
    int err_code, code = js_error(r, &err_code);
    natsMsg_Destroy(r);
    if (code == 0)
        return 0;
    if (err_code == exists_code)
        return -EEXIST;
    return code == 503 ? -ESRCH : -EIO;
}

/* Makes a stream or consumer (create, with its body), or opens the one
 * there: creation is idempotent for the same settings, but two processes
 * that create at the same instant (workers started together) can have
 * one refused while the other's is under way. So a refused create looks
 * (info) and, if it is not there yet, tries again a few times. */
static int js_make(weft_nats_conn *c, const char *create, const char *body,
                   int exists_code, const char *info, weft_time deadline)
{
    int rc = -EIO;
    for (int attempt = 1; attempt <= 5 && rc == -EIO; attempt++) {
        rc = js_api(c, create, body, exists_code, deadline);
        if (rc == -EIO && js_api(c, info, "", 0, deadline) == 0)
            return 0;
        if (rc == -EIO && attempt < 5) {
            /* The pause ends at the caller's deadline, at the latest,
             * and a deadline reached gives -ETIMEDOUT, not the last
             * refusal. */
            weft_time until = weft_now() + attempt * 20 * WEFT_MSEC;
            int src = weft_sleep_until(until < deadline ? until : deadline);
            if (src != 0)
                return src;
            if (weft_now() >= deadline) /* never for WEFT_NEVER */
                return -ETIMEDOUT;
        }
    }
    return rc;
}

static int queue_setup(weft_nats_queue *q, const weft_nats_queue_opts *o,
                       weft_time deadline)
{
    char subj[256], info[256], body[768];
    int64_t ack_wait = o->ack_wait_ns > 0 ? o->ack_wait_ns : 30 * WEFT_SEC;
    snprintf(subj, sizeof subj, "$JS.API.STREAM.CREATE.%s", o->stream);
    snprintf(info, sizeof info, "$JS.API.STREAM.INFO.%s", o->stream);
    snprintf(body, sizeof body,
             "{\"name\":\"%s\",\"subjects\":[\"%s\"],"
             "\"retention\":\"workqueue\",\"storage\":\"file\"}",
             o->stream, o->subject);
    int rc = js_make(q->c, subj, body, 10058, info, deadline);
    if (rc != 0)
        return rc;
    snprintf(subj, sizeof subj, "$JS.API.CONSUMER.DURABLE.CREATE.%s.%s",
             o->stream, o->consumer);
    snprintf(info, sizeof info, "$JS.API.CONSUMER.INFO.%s.%s", o->stream,
             o->consumer);
    snprintf(body, sizeof body,
             "{\"stream_name\":\"%s\",\"config\":{\"durable_name\":\"%s\","
             "\"ack_policy\":\"explicit\",\"ack_wait\":%" PRId64 ","
             "\"deliver_policy\":\"all\",\"max_deliver\":-1}}",
             o->stream, o->consumer, ack_wait);
    return js_make(q->c, subj, body, 10148, info, deadline);
}

int weft_nats_queue_new(weft_nats_queue **out, weft_nats_conn *c,
                        const weft_nats_queue_opts *o, weft_time deadline)
{
    if (!out)
        return -EINVAL;
    *out = NULL;
    if (!c || !o || !name_ok(o->stream, 64) || !name_ok(o->consumer, 64) ||
        !o->subject || strlen(o->subject) >= 128 || strchr(o->subject, ' ') ||
        strchr(o->subject, '"') || o->max_in_flight < 0)
        return -EINVAL;
    weft_nats_queue *q = calloc(1, sizeof *q);
    char *ib = NULL;
    if (!q || natsInbox_Create(&ib) != NATS_OK) {
        free(q);
        return -ENOMEM;
    }
    q->c = c;
    snprintf(q->inbox, sizeof q->inbox, "%s", ib);
    natsInbox_Destroy(ib);
    snprintf(q->subject, sizeof q->subject, "%s", o->subject);
    snprintf(q->next, sizeof q->next, "$JS.API.CONSUMER.MSG.NEXT.%s.%s",
             o->stream, o->consumer);
    weft_sem_init(&q->slots,
                  o->max_in_flight ? o->max_in_flight : DEFAULT_IN_FLIGHT);
    int rc = queue_setup(q, o, deadline);
    if (rc == 0)
        rc = weft_nats_subscribe(c, q->inbox, NULL, &q->sub, deadline);
    if (rc != 0) {
        free(q);
        return rc;
    }
    *out = q;
    return 0;
}

/* A job's status header ("408", ...), or NULL for a job. */
static const char *job_status(natsMsg *m)
{
    const char *v = NULL;
    if (natsMsg_GetDataLength(m) == 0 &&
        natsMsgHeader_Get(m, "Status", &v) == NATS_OK)
        return v;
    return NULL;
}

int weft_nats_queue_free(weft_nats_queue *q)
{
    if (!q)
        return -EINVAL;
    natsMsg *m;
    while (weft_nats_sub_recv(q->sub, &m, 0) == 0) {
        if (job_status(m))
            natsMsg_Destroy(m);
        else
            weft_nats_job_nak(q, m, 0);
    }
    weft_nats_sub_free(q->sub);
    free(q);
    return 0;
}

int weft_nats_job_publish(weft_nats_queue *q, const char *key, const void *data,
                          size_t len, weft_time deadline)
{
    if (!q || !key || !*key || strlen(key) > 128 || strchr(key, ' ') ||
        (!data && len))
        return -EINVAL;
    natsMsg *r = NULL;
    int rc = round_trip(q->c, q->subject, key, data, len, &r, deadline);
    if (rc == -ETIMEDOUT)
        return WEFT_NATS_OUTCOME_UNKNOWN;
    if (rc != 0)
        return rc;
    int err_code, code = js_error(r, &err_code);
    natsMsg_Destroy(r);
    return code == 0 ? 0 : code == 503 ? -ESRCH : -EIO;
}

/* Asks the consumer for one job, for the deadline's time (at most
 * PULL_EXPIRES); the job or a status comes to q->sub. */
static int pull(weft_nats_queue *q, weft_time deadline, weft_time *until)
{
    int64_t left =
        deadline == WEFT_NEVER ? PULL_EXPIRES : deadline - weft_now();
    if (left <= 0)
        return -ETIMEDOUT;
    if (left > PULL_EXPIRES)
        left = PULL_EXPIRES;
    char body[96];
    int n = snprintf(body, sizeof body, "{\"batch\":1,\"expires\":%" PRId64 "}",
                     left);
    *until = weft_now() + left + WEFT_SEC; /* the 408 comes by then */
    if (*until > deadline)
        *until = deadline;
    return weft_nats_error(
        natsConnection_PublishRequest(q->c->nc, q->next, q->inbox, body, n));
}

int weft_nats_job_take(weft_nats_queue *q, natsMsg **job, weft_time deadline)
{
    if (!q || !job)
        return -EINVAL;
    *job = NULL;
    int rc = weft_sem_acquire_until(&q->slots, 1, deadline);
    if (rc != 0)
        return rc;
    weft_time until = 0; /* first: a job an earlier take left, if any */
    for (;;) {
        natsMsg *m;
        rc = weft_nats_sub_recv(q->sub, &m, until);
        if (rc == 0 && !job_status(m)) {
            *job = m;
            return 0;
        }
        if (rc == 0) /* a pull expired (408) or was refused: pull again */
            natsMsg_Destroy(m);
        else if (rc != -ETIMEDOUT)
            break;
        if (weft_now() >= deadline) {
            rc = -ETIMEDOUT;
            break;
        }
        if ((rc = usable(q->c, deadline)) != 0 ||
            (rc = pull(q, deadline, &until)) != 0)
            break;
    }
    weft_sem_release(&q->slots, 1);
    return rc;
}

int weft_nats_job_ack(weft_nats_queue *q, natsMsg *job, weft_time deadline)
{
    if (!q || !job || !natsMsg_GetReply(job))
        return -EINVAL;
    natsMsg *r = NULL;
    int rc =
        weft_nats_request(q->c, natsMsg_GetReply(job), "+ACK", 4, &r, deadline);
    if (rc == 0)
        natsMsg_Destroy(r);
    natsMsg_Destroy(job);
    weft_sem_release(&q->slots, 1);
    return rc == -ETIMEDOUT ? WEFT_NATS_OUTCOME_UNKNOWN : rc;
}

int weft_nats_job_nak(weft_nats_queue *q, natsMsg *job, int64_t delay_ns)
{
    if (!q || !job || !natsMsg_GetReply(job) || delay_ns < 0)
        return -EINVAL;
    char body[64];
    int n = delay_ns ? snprintf(body, sizeof body,
                                "-NAK {\"delay\":%" PRId64 "}", delay_ns)
                     : snprintf(body, sizeof body, "-NAK");
    natsStatus st =
        natsConnection_Publish(q->c->nc, natsMsg_GetReply(job), body, n);
    natsMsg_Destroy(job);
    weft_sem_release(&q->slots, 1);
    return weft_nats_error(st);
}

const char *weft_nats_job_key(natsMsg *job)
{
    const char *v = NULL;
    return job && natsMsgHeader_Get(job, "Nats-Msg-Id", &v) == NATS_OK ? v
                                                                       : NULL;
}

/* The reply subject is $JS.ACK.<stream>.<consumer>.<delivered>.<stream
 * seq>.<consumer seq>.<time>.<pending> (9 tokens), or with a domain and
 * an account hash after ACK (11 or more). */
int weft_nats_job_deliveries(natsMsg *job)
{
    const char *r = job ? natsMsg_GetReply(job) : NULL;
    if (!r || strncmp(r, "$JS.ACK.", 8) != 0)
        return 0;
    const char *tok[16];
    int n = 0;
    for (const char *p = r; p && n < 16; p = strchr(p, '.'), p = p ? p + 1 : p)
        tok[n++] = p;
    int at = n == 9 ? 4 : n >= 11 ? 6 : -1;
    return at < 0 ? 0 : atoi(tok[at]);
}
