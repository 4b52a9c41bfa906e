/* SPDX-License-Identifier: MIT */
/*
 * The actor layer: actors, their mailboxes, asks, stops and monitors
 * (actor.c), and the registry of names (registry.c). Above futures and
 * select, below the runtime. An actor and its monitors are opaque here;
 * actor/struct.h has them, for the files that look inside.
 */
#ifndef WEFT_ACTOR_H
#define WEFT_ACTOR_H

#include "sched/task.h"

/* ---- the actor layer's part of a runtime (weft_runtime.ext) ---- */

struct weft__actor_rt {
    /* the actor registry (registry.c; allocated with the runtime by
     * runtime.c and freed with it) */
    struct weft__registry *registry;
};

_Static_assert(sizeof(struct weft__actor_rt) <=
                   WEFT__RT_OBSERVE - WEFT__RT_ACTOR,
               "the actor layer's part fits in weft_runtime.ext");

static inline struct weft__actor_rt *weft__actor_rt(weft_runtime *rt)
{
    return (struct weft__actor_rt *)(void *)(weft__rtpub(rt)->ext +
                                             WEFT__RT_ACTOR);
}

/* ---- actor.c ---- */

/* 0 if o describes an actor weft_actor_spawn and weft_actor_run accept,
 * else -EINVAL. */
int weft__actor_opts_check(const weft_actor_opts *o);

/* weft_actor_run with a callback: started(ctx, a) runs on the actor's task
 * once the actor exists (registered, on_start done) and before its first
 * message; a is borrowed (weft_actor_ref it to keep it). weft_actor_run is
 * this with started NULL. */
int weft__actor_run_with(const weft_actor_opts *o,
                         void (*started)(void *ctx, weft_actor *a), void *ctx);

/* The wait kinds of actor.c (wait/record.h), each with the actor as its object:
 * an actor waiting for a message, a tell waiting for room, an ask (room,
 * then its reply), weft_actor_join_until. */
extern const struct weft__wait_kind weft__wk_mailbox, weft__wk_tell,
    weft__wk_ask, weft__wk_actor;

/* ---- registry.c ---- */

/* The names of one runtime's actors (Erlang's register and whereis),
 * allocated with the runtime (runtime.c) and zero to begin with. */
typedef struct weft__registry {
    weft__lock lock;
    struct weft__name **buckets; /* nbuckets heads, a power of two */
    size_t nbuckets, count;
} weft__registry;

/* Releases every name a holds; at its exit, once it refuses messages
 * (life >= WEFT__A_STOPPED, so no new name can come). */
void weft__registry_drop(weft_actor *a);
/* Frees r's memory; at the end of the runtime, every actor gone. */
void weft__registry_fini(weft__registry *r);

#endif
