/* SPDX-License-Identifier: MIT */
/*
 * The registry: names for the actors of one runtime (Erlang's register,
 * whereis and unregister).
 *
 * A hash table of copied names under one spinlock, allocated with the
 * runtime (runtime.c) and freed with it. Each entry is also on its
 * actor's list of names (struct weft_actor.names, guarded by this lock),
 * so the actor's exit releases them all at once. An actor refuses new
 * names once it has stopped: weft_register looks at its life under the
 * actor's lock while holding this one, and the exit marks it stopped
 * before taking this lock to drop its names, so no name outlives it. The
 * table holds no reference: an entry goes before its actor's task drops
 * the reference it runs on; weft_whereis takes one under the lock.
 */
#include "actor/struct.h"
#include "util/fault.h"

#include <stdlib.h>
#include <string.h>

#define NAME_MAX_LEN 63

struct weft__name {
    struct weft__name *next;  /* in its bucket */
    struct weft__name *anext; /* in its actor's list */
    weft_actor *a;
    uint64_t hash;
    size_t len;
    char s[NAME_MAX_LEN + 1];
};

/* The name's length, or 0 if it is NULL, empty or too long. */
static size_t name_len(const char *name)
{
    if (!name)
        return 0;
    size_t n = strnlen(name, NAME_MAX_LEN + 1);
    return n > NAME_MAX_LEN ? 0 : n;
}

static uint64_t name_hash(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 0x100000001b3ULL;
    return h;
}

/* The running runtime's registry, or NULL outside a runtime. */
static weft__registry *registry_here(void)
{
    weft_worker *w = weft__tl_worker;
    return w ? weft__actor_rt(weft__wpub(w)->rt)->registry : NULL;
}

/* The entry's link in its bucket (lock held): *result is NULL if none. */
static struct weft__name **find(weft__registry *r, const char *s, size_t n,
                                uint64_t h)
{
    if (!r->nbuckets)
        return NULL;
    struct weft__name **p = &r->buckets[h & (r->nbuckets - 1)];
    while (*p &&
           ((*p)->hash != h || (*p)->len != n || memcmp((*p)->s, s, n) != 0))
        p = &(*p)->next;
    return p;
}

/* Doubles the table (lock held) when it is full; fine to fail (the
 * chains grow instead). */
static void grow(weft__registry *r)
{
    if (r->count < r->nbuckets * 2 && r->nbuckets)
        return;
    size_t nb = r->nbuckets ? r->nbuckets * 2 : 16;
    struct weft__name **b = weft__calloc(nb, sizeof(*b));
    if (!b)
        return;
    for (size_t i = 0; i < r->nbuckets; i++) {
        struct weft__name *e = r->buckets[i];
        while (e) {
            struct weft__name *next = e->next;
            e->next = b[e->hash & (nb - 1)];
            b[e->hash & (nb - 1)] = e;
            e = next;
        }
    }
    free(r->buckets);
    r->buckets = b;
    r->nbuckets = nb;
}

/* Takes e off its actor's list (lock held). */
static void actor_unlink(struct weft__name *e)
{
    struct weft__name **p = &e->a->names;
    while (*p != e)
        p = &(*p)->anext;
    *p = e->anext;
}

int weft_register(const char *name, weft_actor *a)
{
    size_t n = name_len(name);
    if (!n || !weft__actor_ok(a))
        return -EINVAL;
    weft__registry *r = registry_here();
    if (!r)
        return -EPERM;
    if (a->rt != weft__wpub(weft__tl_worker)->rt)
        return -EINVAL;
    struct weft__name *e = weft__malloc(sizeof(*e));
    if (!e)
        return -ENOMEM;
    memcpy(e->s, name, n);
    e->s[n] = '\0';
    e->len = n;
    e->hash = name_hash(name, n);
    e->a = a;
    int rc = 0;
    weft__lock_acquire(&r->lock);
    grow(r);
    struct weft__name **p = find(r, name, n, e->hash);
    if (!p) {
        rc = -ENOMEM; /* no table: grow could not make one */
    } else if (*p) {
        rc = -EEXIST;
    } else {
        weft__lock_acquire(&a->lock);
        bool gone = a->life >= WEFT__A_STOPPED;
        weft__lock_release(&a->lock);
        if (gone) {
            rc = -ESRCH;
        } else {
            e->next = NULL;
            *p = e;
            e->anext = a->names;
            a->names = e;
            r->count++;
        }
    }
    weft__lock_release(&r->lock);
    if (rc)
        free(e);
    return rc;
}

weft_actor *weft_whereis(const char *name)
{
    size_t n = name_len(name);
    weft__registry *r = registry_here();
    if (!n || !r)
        return NULL;
    weft_actor *a = NULL;
    weft__lock_acquire(&r->lock);
    struct weft__name **p = find(r, name, n, name_hash(name, n));
    if (p && *p)
        a = weft_actor_ref((*p)->a);
    weft__lock_release(&r->lock);
    return a;
}

int weft_unregister(const char *name)
{
    size_t n = name_len(name);
    if (!n)
        return -EINVAL;
    weft__registry *r = registry_here();
    if (!r)
        return -EPERM;
    weft__lock_acquire(&r->lock);
    struct weft__name **p = find(r, name, n, name_hash(name, n));
    struct weft__name *e = p ? *p : NULL;
    if (e) {
        *p = e->next;
        actor_unlink(e);
        r->count--;
    }
    weft__lock_release(&r->lock);
    if (!e)
        return -ENOENT;
    free(e);
    return 0;
}

void weft__registry_drop(weft_actor *a)
{
    weft__registry *r = weft__actor_rt(a->rt)->registry;
    weft__lock_acquire(&r->lock);
    struct weft__name *list = a->names;
    a->names = NULL;
    for (struct weft__name *e = list; e; e = e->anext) {
        struct weft__name **p = find(r, e->s, e->len, e->hash);
        *p = e->next;
        r->count--;
    }
    weft__lock_release(&r->lock);
    while (list) {
        struct weft__name *next = list->anext;
        free(list);
        list = next;
    }
}

void weft__registry_fini(weft__registry *r)
{
    for (size_t i = 0; i < r->nbuckets; i++) {
        struct weft__name *e = r->buckets[i];
        while (e) { /* none: every actor dropped its names at its exit */
            struct weft__name *next = e->next;
            free(e);
            e = next;
        }
    }
    free(r->buckets);
    r->buckets = NULL;
    r->nbuckets = r->count = 0;
}
