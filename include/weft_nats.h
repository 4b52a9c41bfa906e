/* SPDX-License-Identifier: MIT */
/*
 * weft_nats: NATS messaging (publish, subscribe, request and reply) from
 * weft tasks, on the NATS C client (nats.c, Debian's libnats-dev).
 *
 * A task connects with weft_nats_connect, publishes with weft_nats_publish,
 * subscribes with weft_nats_subscribe and takes the messages with
 * weft_nats_sub_recv, asks with weft_nats_request, and closes with
 * weft_nats_close. Every call that waits parks the task, never its worker,
 * takes an absolute deadline (WEFT_NEVER: none) and is a cancellation
 * point; each says below what a cancel leaves behind.
 *
 * How. nats.c is driven through its event-loop adapter
 * (natsOptions_SetEventLoop): its socket is watched by weft's poller from
 * one task per connection, the driver, spawned in the scope given to
 * weft_nats_connect, which calls natsConnection_ProcessReadEvent and
 * natsConnection_ProcessWriteEvent when the socket is ready. nats.c calls
 * the adapter's attach, read, write and detach from its own threads too
 * (a reconnect attaches a new socket from nats.c's reconnect thread):
 * those calls only record what they ask for under a lock and wake the
 * driver, which does the work on its worker. No nats.c call that blocks
 * (natsConnection_Request, _Flush, natsSubscription_NextMsg) runs on a
 * worker: a request is natsConnection_PublishRequest and a reply taken
 * from the connection's own reply inbox (wildcard subscriptions); a
 * flush is a message sent to that inbox and waited for; connecting and
 * closing, which nats.c does with blocking calls, run on weft's blocking
 * pool (weft_blocking).
 *
 * A subscription's messages are taken off nats.c by the driver, on its
 * worker, right after the read that brought them (subscriptions are
 * nats.c's synchronous kind, with no thread of their own), and put into
 * the subscription's bounded queue (weft_nats_sub_recv), in the order the
 * server sent them. A "no responders" status (503) that nats.c reports
 * for a subscription comes as an empty message with a Status header, on
 * the subscription's subject. Replies come the same way, through eight
 * reply slots (a request waits on a slot of its own, so that a "no
 * responders" status names its request); when more requests wait at
 * once, the others' replies come through a subscription of nats.c's
 * asynchronous kind, by a thread of nats.c's. Connection events
 * (disconnected, reconnected, closed, errors) come by another of nats.c's
 * threads, whose callback puts them into the connection's queue
 * (weft_nats_event_recv).
 *
 * Backpressure and what is dropped. When a subscription's queue is full,
 * the driver leaves its messages with nats.c until a receiver makes room
 * (the driver goes on with everything else), and the messages that keep
 * arriving pile up in nats.c's own pending list for the subscription,
 * bounded by weft_nats_sub_opts' pending limits. Past
 * those limits nats.c drops messages and calls the subscription a slow
 * consumer: the drops are counted (weft_nats_sub_stats.dropped, nats.c's
 * own count), the notice is a WEFT_NATS_EVENT_SLOW_CONSUMER event and
 * counted in weft_nats_conn_stats, never silent. The connection's event
 * queue drops events when full, and counts them (events_dropped); the
 * per-kind counters of weft_nats_conn_stats count every event, queued or
 * not.
 *
 * Delivery contract. NATS core is at most once: a published message (and
 * a request) reaches the subscribers that are subscribed, connected and
 * keeping up when the server routes it, or nobody; nothing is stored or
 * retried. weft_nats_publish returning 0 means nats.c has the message in
 * its outgoing buffer, not that anyone received it; weft_nats_flush
 * returning 0 means the server has received everything published on the
 * connection before the flush. A request that times out (-ETIMEDOUT) or is
 * cancelled may have been handled by a responder: its outcome is unknown.
 *
 * Threads. Every call here is made from a task (-EPERM elsewhere), except
 * those whose comment says "any thread" (the _stats_get calls, and the
 * functions that only read or format a value). A connection and its
 * subscriptions may be used by any number of tasks on any workers at once,
 * except that weft_nats_close and weft_nats_sub_free end the object: no other
 * call on it may run or start then.
 *
 * Messages are nats.c's natsMsg: read them with natsMsg_GetSubject,
 * natsMsg_GetData, natsMsg_GetDataLength, natsMsg_GetReply, and free
 * each with natsMsg_Destroy. Reply to a request by publishing to its
 * natsMsg_GetReply subject.
 *
 * TLS, credentials and nats.c's other options are not offered yet: the
 * connection is plain TCP to the URLs given.
 *
 * Link with -lweft_nats -lweft -lnats (pkg-config weft_nats; CMake:
 * find_package(weft COMPONENTS nats), target weft::nats). Nothing in
 * libweft depends on nats.c.
 */
#ifndef WEFT_NATS_H
#define WEFT_NATS_H

#include <errno.h> /* the codes below: -ETIMEDOUT, -ESRCH, ... */
#include <nats/nats.h>
#include <stddef.h>
#include <stdint.h>

#include "weft.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WEFT_NATS_VERSION 0x000100 /* 0.1.0 */

/* A connection to a NATS server (or cluster). */
typedef struct weft_nats_conn weft_nats_conn;
/* A subscription of a connection, with its queue of messages. */
typedef struct weft_nats_sub weft_nats_sub;

/* Options of weft_nats_connect; zero is the defaults. */
typedef struct weft_nats_opts {
    /* The server, or a comma-separated list of them
     * ("nats://127.0.0.1:4222"); NULL: NATS_DEFAULT_URL. */
    const char *url;
    /* The connection's name, as the server shows it; NULL: none. */
    const char *name;
    /* Room in the connection's event queue (weft_nats_event_recv); 0: 64.
     * Events that find it full are dropped and counted. */
    size_t event_queue;
    /* Bytes waiting to be sent past which weft_nats_publish and
     * weft_nats_request wait for the driver to write some out; 0: 8 MiB. */
    size_t max_buffered;
    /* Reconnection: the wait between two attempts on one server (0:
     * nats.c's 2 s), and the attempts before giving up (0: nats.c's 60;
     * negative: forever). noreconnect set: never reconnect. */
    int64_t reconnect_wait_ns;
    int max_reconnect;
    int noreconnect;
} weft_nats_opts;

/* Connects to the server, parking the calling task while nats.c connects
 * on a thread of weft's blocking pool, and spawns the connection's driver
 * task in scope s (NULL: the caller's current scope), which must stay open
 * until the connection is closed: weft_scope_join(s) waits for the driver,
 * which ends after weft_nats_close, or after nats.c gave up reconnecting
 * and the connection is closed. If s is cancelled the driver closes the
 * connection itself (every later call on it fails with -ENOTCONN) and
 * ends; weft_nats_close is still needed to free it.
 * o may be NULL (the defaults). deadline bounds the connect (nats.c's
 * own connect timeout is set from it). Returns 0 and sets *out, or
 * -ECONNREFUSED (no server could be reached), -ETIMEDOUT, -ECANCELED,
 * -EINVAL, -ENOMEM, -EPERM (not in a task), -EIO (any other nats.c error).
 * Cancellation point: a cancelled or timed-out connect leaves nothing
 * behind for the caller (a connection that nats.c completes after the
 * caller left is closed by its driver). Blocks. */
int weft_nats_connect(weft_scope *s, const weft_nats_opts *o,
                      weft_nats_conn **out, weft_time deadline);

/* Closes the connection and frees it. First, while connected, a flush
 * (up to 0.5 s for the server's answer), so that what was published
 * before the close has reached the server; then natsConnection_Close.
 * Its subscriptions end (their weft_nats_sub_recv return -EPIPE once
 * drained; each still needs weft_nats_sub_free), and requests still
 * waiting return -ENOTCONN. Waits until nats.c has closed the
 * connection, or the deadline. Returns 0, -ETIMEDOUT or -ECANCELED (the
 * close goes on without the caller: the driver finishes it and ends),
 * -EINVAL. c is freed in every case: no other call on it may run or
 * start. Cancellation point. Blocks. */
int weft_nats_close(weft_nats_conn *c, weft_time deadline);

/* Publishes len bytes of data to subject. Waits only while the
 * connection's outgoing buffer holds more than max_buffered bytes
 * (backpressure: the driver writes it out). Returns 0 once nats.c has the
 * message (see the delivery contract above), or -ETIMEDOUT, -ECANCELED
 * (nothing published), -EINVAL (a bad subject), -ENOTCONN (closed),
 * -ENOBUFS (disconnected, and nats.c's reconnect buffer is full), -EPERM,
 * -EIO. Cancellation point: an error means nothing was published.
 * Blocks. */
int weft_nats_publish(weft_nats_conn *c, const char *subject, const void *data,
                      size_t len, weft_time deadline);

/* Publishes a request (len bytes of data) to subject with a reply subject
 * of the connection's inbox, and waits for the first reply, which it
 * stores in *reply (free it with natsMsg_Destroy). Returns 0, or
 * -ETIMEDOUT, -ECANCELED, -ESRCH (no responders: the server says nobody
 * subscribes to subject), -ENOTCONN, -ENOBUFS, -EINVAL, -EPERM, -EIO.
 * Cancellation point: after -ETIMEDOUT or -ECANCELED the request may have
 * been sent and handled (the outcome is unknown); a reply that comes
 * later is dropped and counted (weft_nats_conn_stats.late_replies).
 * Blocks. */
int weft_nats_request(weft_nats_conn *c, const char *subject, const void *data,
                      size_t len, natsMsg **reply, weft_time deadline);

/* Waits until the server has received everything published on c before
 * the call (a message to the connection's own inbox, which the server
 * sends back after the earlier ones). Returns 0, -ETIMEDOUT, -ECANCELED,
 * -ENOTCONN, -EPERM, -EIO. Cancellation point: a cancel leaves nothing
 * behind but the marker message, whose late arrival is dropped.
 * Blocks. */
int weft_nats_flush(weft_nats_conn *c, weft_time deadline);

/* Options of weft_nats_subscribe; zero is the defaults. */
typedef struct weft_nats_sub_opts {
    /* A queue group: each message goes to one member; NULL: none. */
    const char *queue;
    /* Room in the subscription's queue, in messages; 0: 1024. */
    size_t capacity;
    /* nats.c's pending limits for the subscription, beyond the queue:
     * messages and bytes it keeps while the queue is full before it drops
     * (0: nats.c's 65536 messages, 64 MiB; negative: no limit). */
    int pending_msgs;
    int pending_bytes;
} weft_nats_sub_opts;

/* Subscribes to subject (wildcards allowed) and waits until the server
 * has the subscription (a flush), so that a message published after this
 * returns, from anywhere, is delivered to it. o may be NULL. Returns 0 and
 * sets *out, or -ETIMEDOUT, -ECANCELED, -EINVAL (a bad subject),
 * -ENOTCONN, -ENOMEM, -EPERM, -EIO. Cancellation point: on any error no
 * subscription is left. Blocks. */
int weft_nats_subscribe(weft_nats_conn *c, const char *subject,
                        const weft_nats_sub_opts *o, weft_nats_sub **out,
                        weft_time deadline);

/* Takes the subscription's next message, in the order the server sent
 * them, waiting until there is one. Returns 0 and sets *msg (free it with
 * natsMsg_Destroy), or -ETIMEDOUT, -ECANCELED, -EPIPE (the subscription
 * ended, its connection closed, and every message was taken), -EINVAL,
 * -EPERM. Cancellation point: on any error nothing was taken. Any number
 * of tasks may receive from one subscription; each message goes to one.
 * Blocks. */
int weft_nats_sub_recv(weft_nats_sub *s, natsMsg **msg, weft_time deadline);

/* Unsubscribes, drops the messages still queued and frees s. No task may
 * be receiving from s, or start to. Returns 0 or -EINVAL. Never blocks;
 * not a cancellation point. */
int weft_nats_sub_free(weft_nats_sub *s);

/* A subscription's figures (weft_nats_sub_stats_get). */
typedef struct weft_nats_sub_stats {
    uint64_t received;    /* messages nats.c handed to the queue */
    uint64_t taken;       /* messages taken by weft_nats_sub_recv */
    size_t queued;        /* in the queue now */
    size_t capacity;      /* the queue's room */
    uint64_t full_waits;  /* times the queue filled with more waiting */
    int producer_waiting; /* 1 while it is full with more waiting now */
    int pending;          /* messages nats.c holds beyond the queue */
    int64_t dropped;      /* messages nats.c dropped (slow consumer) */
} weft_nats_sub_stats;

/* Fills *out with s's figures now. Returns 0 or -EINVAL. Any thread;
 * never blocks (takes nats.c's and the queue's locks for a moment). */
int weft_nats_sub_stats_get(weft_nats_sub *s, weft_nats_sub_stats *out);

/* What happened to a connection (weft_nats_event_recv). */
typedef enum weft_nats_event_kind {
    WEFT_NATS_EVENT_DISCONNECTED = 1,  /* the socket broke; reconnecting */
    WEFT_NATS_EVENT_RECONNECTED = 2,   /* connected again (a new socket) */
    WEFT_NATS_EVENT_CLOSED = 3,        /* closed for good */
    WEFT_NATS_EVENT_SLOW_CONSUMER = 4, /* a subscription dropped messages */
    WEFT_NATS_EVENT_ERROR = 5,         /* another asynchronous error */
} weft_nats_event_kind;

typedef struct weft_nats_event {
    weft_nats_event_kind kind;
    int status; /* nats.c's natsStatus, for SLOW_CONSUMER and ERROR */
} weft_nats_event;

/* Takes the connection's next event, in the order nats.c reported them,
 * waiting until there is one. Returns 0, -ETIMEDOUT, -ECANCELED, -EINVAL,
 * -EPERM. Cancellation point: on any error nothing was taken. Blocks. */
int weft_nats_event_recv(weft_nats_conn *c, weft_nats_event *ev,
                         weft_time deadline);

/* A connection's figures (weft_nats_conn_stats_get). */
typedef struct weft_nats_conn_stats {
    uint64_t attaches;       /* sockets nats.c attached (1 + reconnects) */
    uint64_t disconnects;    /* DISCONNECTED events */
    uint64_t reconnects;     /* RECONNECTED events */
    uint64_t slow_consumers; /* SLOW_CONSUMER notices */
    uint64_t errors;         /* other asynchronous errors */
    uint64_t events_dropped; /* events that found the queue full */
    uint64_t late_replies;   /* replies whose requester had left */
    uint64_t read_events;    /* natsConnection_ProcessReadEvent calls */
    uint64_t write_events;   /* natsConnection_ProcessWriteEvent calls */
    size_t requests_waiting; /* requests and flushes waiting now */
    int connected;           /* 1 while connected */
} weft_nats_conn_stats;

/* Fills *out with c's figures now. Returns 0 or -EINVAL. Any thread;
 * never blocks. */
int weft_nats_conn_stats_get(weft_nats_conn *c, weft_nats_conn_stats *out);

/* The weft code for a nats.c status (0 for NATS_OK). Any thread; never
 * blocks. */
int weft_nats_error(natsStatus s);

/* ------------------------------------------------------------------------
 * Remote actors
 *
 * An actor (weft.h's weft_actor) exported on a connection is reachable
 * from any process connected to the same NATS servers, by its reference:
 * the node that exported it, its number on that node and its incarnation,
 * a random number drawn at each export, so that an actor restarted and
 * exported again is never taken for its predecessor (a message to the
 * old reference finds no responder). The reference's subject is
 * "weft.actor.<node>.<id>.<incarnation>"; its text form (for handing it
 * to another process) is "<node>.<id>.<incarnation>".
 *
 * Delivery, per call:
 * - weft_nats_tell is at most once: 0 means the message is in the
 *   connection's outgoing buffer. It may be lost (no server, no such
 *   actor or incarnation, a full mailbox on the other side past the
 *   deadline carried with it), and nothing says so.
 * - weft_nats_ask returns the actor's reply (0, or the error the actor
 *   replied with), or -ESRCH when it certainly was not handled (no
 *   responder for that reference: not exported, its exporter gone, or
 *   another incarnation; or the actor exited before handling it), or
 *   WEFT_NATS_OUTCOME_UNKNOWN when the deadline passed first: the actor
 *   may have handled it, or may still (Jepsen's "info"). A cancel
 *   (-ECANCELED) leaves the outcome unknown too.
 * Messages are bytes, msg_size of them (the actor's), copied as they are:
 * send plain data in an agreed byte order, never pointers.
 * ---------------------------------------------------------------------- */

/* An ask whose deadline passed before its reply came: the outcome is
 * unknown (the message may have been handled, or be handled later).
 * Distinct from -ETIMEDOUT, which weft's local calls return. */
#define WEFT_NATS_OUTCOME_UNKNOWN (-ETIME)

/* A remote actor's reference. */
typedef struct weft_nats_ref {
    char node[48];        /* the exporting node's name */
    uint64_t id;          /* the actor's number there */
    uint64_t incarnation; /* drawn at the export: never reused */
} weft_nats_ref;

/* Writes r's text form, "<node>.<id>.<incarnation>", into buf (n bytes).
 * Returns its length, or -ENOSPC (buf too small), -EINVAL. Any thread;
 * never blocks. */
int weft_nats_ref_format(const weft_nats_ref *r, char *buf, size_t n);

/* Reads a reference from its text form. Returns 0, or -EINVAL (not one).
 * Any thread; never blocks. */
int weft_nats_ref_parse(weft_nats_ref *r, const char *text);

/* An actor's export (weft_nats_export_new). */
typedef struct weft_nats_export weft_nats_export;

/* Options of weft_nats_export_new. */
typedef struct weft_nats_export_opts {
    /* This node's name: letters, digits, '-' and '_', 1 to 47 of them
     * (required). */
    const char *node;
    /* The actor's msg_size and reply_size, as it was spawned with
     * (msg_size required). A message of another size is dropped. */
    size_t msg_size;
    size_t reply_size;
    /* The scope of the export's server task (NULL: the caller's current
     * scope); it must stay open until weft_nats_export_free. */
    weft_scope *scope;
    /* Asks handled at once (each waits for the actor in a task of its
     * own); more wait in the export's queue. 0: 64. */
    int max_asks;
} weft_nats_export_opts;

/* Exports actor a on connection c: a server task in o->scope subscribes
 * to a's subject and hands each tell to weft_actor_tell and each ask to
 * weft_actor_ask (with the deadline its sender gave, on this machine's
 * clock), publishing the reply. Holds a reference to a until freed.
 * Returns 0 and sets *out (its reference: weft_nats_export_ref), or
 * -EINVAL, -ENOMEM, -ENOTCONN, -ETIMEDOUT, -ECANCELED (the subscription
 * is made with a flush, as weft_nats_subscribe's). Cancellation point: on
 * any error nothing is exported. Blocks. */
int weft_nats_export_new(weft_nats_export **out, weft_nats_conn *c,
                         weft_actor *a, const weft_nats_export_opts *o,
                         weft_time deadline);

/* The reference under which e's actor is exported. Returns 0 or -EINVAL.
 * Any thread; never blocks. */
int weft_nats_export_ref(const weft_nats_export *e, weft_nats_ref *out);

/* Withdraws the export: stops its server, cancels the asks it is
 * handling (their askers get no reply: for them the outcome is unknown),
 * unsubscribes, drops its reference to the actor and frees e. Messages
 * find no responder once the server has the unsubscription: a
 * weft_nats_flush of the export's connection after this call waits for
 * that. Returns 0 or -EINVAL. Waits for the server and
 * its asks to end, which they do at once; not a cancellation point. */
int weft_nats_export_free(weft_nats_export *e);

/* Tells the remote actor r the message msg (len bytes, its msg_size): at
 * most once (see above). The receiving side waits for room in the
 * actor's mailbox until deadline (WEFT_NEVER: as long as it takes).
 * Returns 0 (sent), or as weft_nats_publish. Cancellation point: an error
 * means nothing was sent. Blocks only as weft_nats_publish does. */
int weft_nats_tell(weft_nats_conn *c, const weft_nats_ref *r, const void *msg,
                   size_t len, weft_time deadline);

/* Asks the remote actor r with msg (len bytes) and waits for its reply,
 * copied to reply (reply_len bytes at most; reply may be NULL). Returns 0,
 * the negative code the actor replied with (as weft_actor_ask's: -ENOMSG,
 * -ESRCH when it exited first, ...), -ESRCH (no responder: see above),
 * WEFT_NATS_OUTCOME_UNKNOWN (the deadline passed), -ECANCELED (outcome
 * unknown too), -EMSGSIZE (the reply is longer than reply_len), -ENOTCONN,
 * -EINVAL, -EPERM. Cancellation point. Blocks. */
int weft_nats_ask(weft_nats_conn *c, const weft_nats_ref *r, const void *msg,
                  size_t len, void *reply, size_t reply_len,
                  weft_time deadline);

/* ------------------------------------------------------------------------
 * Remote monitors
 *
 * A monitor watches a remote actor's reference from another process and
 * gives one down notice (weft_nats_monitor_recv), which says either that
 * the actor exited, with its exit status, or that its node is unreachable
 * (Akka's AddressTerminated): then nothing is known of the actor.
 *
 * What drives it:
 * - the exit: the exporting side monitors its actor and, when it exits,
 *   publishes its status on "weft.down.<node>.<id>.<incarnation>", to
 *   which every monitor of the reference subscribes;
 * - a heartbeat: every interval the monitor sends a request to the
 *   reference, which the export's server answers with "alive" or "exited
 *   with status s" (so an exit notice missed while disconnected is learned
 *   at the next beat);
 * - NATS's signals: a heartbeat that finds no responder (the server says
 *   nobody serves the reference: its process ended or lost its
 *   connection, or the export was withdrawn) makes the node unreachable at
 *   once, unless the monitor's own connection was disconnected since the
 *   last answered beat (then the exporter may still be reconnecting, and
 *   it only counts as a missed beat); the monitor's connection closed for
 *   good makes it unreachable at once;
 * - the timeout: no beat answered for timeout_ns (the node hung, the
 *   network or the server is down, the monitor's connection is
 *   disconnected) makes it unreachable.
 * So a server restarted, or a connection lost, for less than the timeout
 * gives no notice; past it the notice is final: the monitor stops, and a
 * node that comes back later does not bring the reference back (monitor
 * it again; a restarted actor is a new incarnation anyway).
 *
 * Supervision stays on each node: a supervisor restarts its own actors;
 * across nodes there is only this monitoring.
 * ---------------------------------------------------------------------- */

/* A remote actor's monitor (weft_nats_monitor_new). */
typedef struct weft_nats_monitor weft_nats_monitor;

/* Options of weft_nats_monitor_new; zero is the defaults. */
typedef struct weft_nats_monitor_opts {
    /* The scope of the monitor's task (NULL: the caller's current scope);
     * it must stay open until weft_nats_monitor_free. Cancelling it stops
     * the monitor: no notice comes after that. */
    weft_scope *scope;
    /* Time between two heartbeats; 0: 1 s. */
    int64_t interval_ns;
    /* No heartbeat answered for this long: unreachable; 0: 5 s. At least
     * the interval. */
    int64_t timeout_ns;
} weft_nats_monitor_opts;

/* What a down notice says. */
typedef enum weft_nats_down_kind {
    WEFT_NATS_DOWN_EXITED = 1,      /* the actor exited: status is its own */
    WEFT_NATS_DOWN_UNREACHABLE = 2, /* its node is unreachable */
} weft_nats_down_kind;

/* A down notice. */
typedef struct weft_nats_down {
    weft_nats_down_kind kind;
    /* EXITED: the actor's exit status (0, or its negative code).
     * UNREACHABLE: why: -ESRCH (no responder for the reference),
     * -ETIMEDOUT (no heartbeat answered for timeout_ns), -ENOTCONN (the
     * monitor's connection closed). */
    int status;
    weft_nats_ref ref; /* the reference monitored */
} weft_nats_down;

/* Monitors the remote actor r over connection c: subscribes to its exit
 * notices (with a flush, as weft_nats_subscribe) and starts the monitor's
 * task in o->scope, which sends the first heartbeat at once. o may be
 * NULL. Returns 0 and sets *out, or -EINVAL (r or the options invalid),
 * -ENOMEM, -ENOTCONN, -ETIMEDOUT, -ECANCELED, -EPERM. Cancellation point:
 * on any error nothing is left. Blocks. */
int weft_nats_monitor_new(weft_nats_monitor **out, weft_nats_conn *c,
                          const weft_nats_ref *r,
                          const weft_nats_monitor_opts *o, weft_time deadline);

/* Waits for m's down notice and copies it to *down. Once given, the same
 * notice is given again to every later call. Returns 0, -ETIMEDOUT (no
 * notice by the deadline: the actor is alive or not known to be down),
 * -ECANCELED, -EINVAL, -EPERM. Cancellation point: a cancel or timeout
 * leaves the monitor running. Any number of tasks may wait at once.
 * Blocks. */
int weft_nats_monitor_recv(weft_nats_monitor *m, weft_nats_down *down,
                           weft_time deadline);

/* Stops the monitor (no notice comes after this), unsubscribes and frees
 * m. No task may be waiting on m, or start to. Returns 0 or -EINVAL.
 * Waits for the monitor's task to end, which it does at once; not a
 * cancellation point. */
int weft_nats_monitor_free(weft_nats_monitor *m);

/* ------------------------------------------------------------------------
 * Work queues on JetStream
 *
 * A work queue is a JetStream stream with work-queue retention (a job is
 * kept until it is acknowledged, on the server's disk) and one durable
 * pull consumer that every worker shares: each job goes to one worker at
 * a time. A producer publishes jobs with weft_nats_job_publish, which
 * waits for the stream to say it has stored the job; a worker takes jobs
 * with weft_nats_job_take and ends each with weft_nats_job_ack (done) or
 * weft_nats_job_nak (again, after a delay). A job taken and neither acked
 * nor nacked within ack_wait (its worker died, hung, or lost its
 * connection) is delivered again.
 *
 * Delivery: at least once. A stored job is delivered until it is acked;
 * it may be delivered more than once (a nak, an ack that did not reach
 * the server, a worker killed after doing the work and before the ack),
 * so a job's effect must be made idempotent, by its key: every job has
 * one (Nats-Msg-Id), and the stream also stores a job once per key within
 * its duplicate window, so a publish retried after an unknown outcome
 * does not make a second job.
 *
 * Backpressure: a queue handle lets its tasks hold at most max_in_flight
 * jobs at once (taken and not yet acked or nacked); take waits for one to
 * end. The server holds the rest.
 *
 * A job is a natsMsg (natsMsg_GetData, natsMsg_GetDataLength); ack and
 * nak free it. A job whose task is cancelled should be nacked (a nak
 * never waits), not dropped: weft_nats_queue_free nacks the jobs its
 * handle received and nobody took, and a job dropped otherwise comes back
 * only after ack_wait.
 * ---------------------------------------------------------------------- */

/* A work queue handle (weft_nats_queue_new). */
typedef struct weft_nats_queue weft_nats_queue;

/* Options of weft_nats_queue_new. Names are letters, digits, '-', '_'. */
typedef struct weft_nats_queue_opts {
    const char *stream;   /* the stream's name (required) */
    const char *subject;  /* the jobs' subject (required; the stream's) */
    const char *consumer; /* the workers' shared consumer (required) */
    /* How long a taken job stays taken without an ack or a nak before it
     * is delivered again; 0: 30 s. */
    int64_t ack_wait_ns;
    /* Jobs this handle's tasks may hold at once; 0: 64. */
    int max_in_flight;
} weft_nats_queue_opts;

/* Opens a work queue on connection c: makes the stream and the consumer
 * if they are not there (each producer and worker may call it; the same
 * options find them made). The server must run JetStream (nats-server
 * -js). Returns 0 and sets *out, or -ESRCH (no JetStream), -EEXIST (a
 * stream or consumer of that name with other settings), -EINVAL,
 * -ETIMEDOUT, -ECANCELED, -ENOTCONN, -ENOMEM, -EIO. Cancellation point:
 * on any error no handle is left (a stream or consumer it made stays on
 * the server). Blocks. */
int weft_nats_queue_new(weft_nats_queue **out, weft_nats_conn *c,
                        const weft_nats_queue_opts *o, weft_time deadline);

/* Nacks the jobs q received that no task took, and frees q. No task may
 * use q then. Returns 0 or -EINVAL. Never blocks; not a cancellation
 * point. */
int weft_nats_queue_free(weft_nats_queue *q);

/* Publishes a job of len bytes with its idempotency key (required: at
 * most 128 bytes, no spaces) and waits until the stream has stored it.
 * Returns 0 (stored now, or already stored under that key within the
 * duplicate window), WEFT_NATS_OUTCOME_UNKNOWN (the deadline passed: it
 * may be stored; publishing again with the same key is safe), -ESRCH (no
 * stream takes the subject), -ECANCELED (outcome unknown too), -EINVAL,
 * -ENOTCONN, -EIO. Cancellation point. Blocks. */
int weft_nats_job_publish(weft_nats_queue *q, const char *key, const void *data,
                          size_t len, weft_time deadline);

/* Takes the next job, waiting until there is one (and until this
 * handle holds fewer than max_in_flight). Returns 0 and sets *job, or
 * -ETIMEDOUT, -ECANCELED, -ENOTCONN, -EINVAL, -EPERM. Cancellation
 * point: on any error no job was taken (one the server delivers after the
 * caller left waits in the handle for the next take). Blocks. */
int weft_nats_job_take(weft_nats_queue *q, natsMsg **job, weft_time deadline);

/* Acknowledges job (done: it is never delivered again) and waits for the
 * server to confirm; frees job. Returns 0, WEFT_NATS_OUTCOME_UNKNOWN (the
 * deadline passed: the job may be delivered again), -ECANCELED (the
 * same), -ENOTCONN, -EINVAL, -EIO. Cancellation point. Blocks. */
int weft_nats_job_ack(weft_nats_queue *q, natsMsg *job, weft_time deadline);

/* Gives job back, to be delivered again after delay_ns (0: at once), and
 * frees it. Returns 0 or -ENOTCONN, -EINVAL, -EIO (the job then comes
 * back after ack_wait). Never waits for the server; not a cancellation
 * point: a cancelled task may nak its job. */
int weft_nats_job_nak(weft_nats_queue *q, natsMsg *job, int64_t delay_ns);

/* The job's key, or NULL. Any thread; never blocks. */
const char *weft_nats_job_key(natsMsg *job);

/* How many times job has been delivered (1 the first time), or 0 if
 * unknown. Any thread; never blocks. */
int weft_nats_job_deliveries(natsMsg *job);

#ifdef __cplusplus
}
#endif
#endif
