/* SPDX-License-Identifier: MIT */
/*
 * The simulation layer (weft.h, section 17): the mode (sim.c: its start
 * and end, the hosts, the network's verbs, the event log, the poller) and
 * the simulated network's sockets (net.c), behind the io layer's socket
 * table (io/io.h, weft__netsys), which net.c fills in.
 *
 * Everything here runs on the simulated runtime's one worker (its thread
 * also starts and ends the simulation): no lock. One simulated runtime
 * at a time in a process (the socket table is global).
 */
#ifndef WEFT_SIM_H
#define WEFT_SIM_H

#include "io/io.h"
#include "sched/poller.h"
#include "sched/scheduler.h"
#include "timer/timer.h"

/* ---- for the runtime ---- */

/* Starts rt's simulation (rt->sim set, before any task runs): installs
 * the socket table and the pick hook. 0, -EINVAL (bad options), -EBUSY
 * (another simulated runtime runs), -ENOMEM. */
int weft__sim_start(weft_runtime *rt, const weft_sim_opts *opts);
/* Ends it: frees the network, keeps the log (weft_sim_log_hash). Does
 * nothing if rt's simulation is not running. */
void weft__sim_end(weft_runtime *rt);

/* ---- inside the layer ---- */

#define SIM_MAX_HOSTS 64

typedef struct sim_pkt sim_pkt;
typedef struct sim_sock sim_sock;

/* A simulated host (weft_sim_host). */
struct weft_sim_host {
    char *name;
    int idx;            /* in the network's table; its address 10.0.0.idx+1 */
    bool down;          /* crashed and not restarted: packets to it are lost */
    int booting;        /* boot tasks spawned that have not run yet */
    bool crash_booting; /* a crash came before the boot ran: it stops */
    struct sim_life *cur; /* the incarnation running, or NULL */
    weft_scope *home;     /* where boot tasks go: the scope current at
                           * weft_sim_host_start */
    weft_fn fn;           /* what a boot runs (weft_sim_host_start) */
    void *arg;
    uint16_t next_port; /* the next ephemeral port to try */
};

/* One boot of a host, on its boot task's stack: its root scope. */
typedef struct sim_life {
    weft_sim_host *h;
    weft_scope *scope;
    bool dead; /* crashed: its tasks unwind, its socket calls fail */
    struct sim_life *next;
} sim_life;

/* A link between two hosts, one way. */
typedef struct sim_link {
    unsigned char flags;     /* LINK_* */
    sim_pkt *parked, *ptail; /* held, or a stream's across a partition */
} sim_link;

enum { LINK_PART = 1, LINK_HOLD = 2 };

typedef struct sim_net {
    weft_runtime *rt;
    weft_sim_opts o;   /* resolved: no zero means "default" any more */
    uint64_t rng;      /* splitmix64 state: the network's draws */
    unsigned off;      /* fault classes switched off (weft__sim_off) */
    weft__timer timer; /* worker 0's wheel: the next packet's arrival */
    weft_sim_host *hosts[SIM_MAX_HOSTS];
    int nhosts;
    sim_life *lives; /* incarnations whose boot task has not ended */
    sim_link links[SIM_MAX_HOSTS][SIM_MAX_HOSTS]; /* [from][to] */
    sim_pkt **heap; /* packets in flight, by (when, seq) */
    size_t nheap, capheap;
    uint64_t seq;
    sim_sock *socks; /* live sockets (doubly linked) */
    sim_sock *gone;  /* closed or crashed ones, freed at the run's end (a
                      * packet in flight may still point at one) */
    sim_sock **fds;  /* by descriptor - WEFT__SIM_FD_BASE */
    int nfds;
} sim_net;

extern sim_net *weft__sim; /* the running simulation, or NULL */

uint64_t weft__sim_rand(void);
/* The event log: a line, with the virtual time first. */
void weft__sim_logf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The host of the calling task; *dead: of a crashed incarnation. */
weft_sim_host *weft__sim_host_here(bool *dead);
/* Host of address ip (host order): 127.x and 0.0.0.0 are `self`. */
weft_sim_host *weft__sim_host_by_ip(uint32_t ip, weft_sim_host *self);
uint32_t weft__sim_host_ip(const weft_sim_host *h);

extern const weft__poller_ops weft__sim_poller;

/* net.c */
extern const weft__netsys weft__sim_netsys;
/* Sends, delivers and parks packets (the timer and the verbs). */
void weft__sim_net_fire(weft__timer *t);
void weft__sim_unpark(sim_link *l);
/* A crash: h's sockets are dropped, their peers reset. */
void weft__sim_net_crash(weft_sim_host *h);
void weft__sim_net_free(sim_net *n);

#endif
