/* SPDX-License-Identifier: MIT */
/*
 * A hierarchical timing wheel with nanosecond resolution.
 *
 * Level L has 64 slots of 2^(6L) ns each. A timer due at `when` is filed at
 * the level of the highest 6-bit group in which `when` differs from
 * `elapsed` (the time the wheel has reached), in the slot given by that
 * group of `when`. So:
 * - arm and disarm are O(1): a list insert or unlink and a bit in the
 *   level's occupancy mask;
 * - every timer at level 0 is due within the current 64 ns and a level-0
 *   slot holds timers of one exact deadline, fired in the order armed;
 * - any timer at level L is due before any timer at level L+1 (they agree
 *   with `elapsed` above level L), so the next expiry is the first occupied
 *   slot at or after elapsed's position in the lowest non-empty level.
 * Advancing to a higher-level slot re-files its timers relative to the new
 * `elapsed`, which puts each at a strictly lower level: a timer moves down
 * at most 10 times before it fires. Most timers in a runtime are deadlines
 * of blocking calls that are disarmed long before that.
 */
#include "timer/timer.h"

#include <string.h>

#define LEVEL_BITS 6
#define SLOT_MASK ((uint64_t)WEFT_WHEEL_SLOTS - 1)

static unsigned level_for(uint64_t elapsed, uint64_t when)
{
    uint64_t masked = (elapsed ^ when) | SLOT_MASK;
    unsigned significant = 63u - (unsigned)__builtin_clzll(masked);
    return significant / LEVEL_BITS;
}

static unsigned slot_for(uint64_t when, unsigned level)
{
    return (unsigned)((when >> (level * LEVEL_BITS)) & SLOT_MASK);
}

void weft__wheel_init(weft__wheel *wh, int64_t now)
{
    memset(wh, 0, sizeof(*wh));
    wh->elapsed = now;
    for (int l = 0; l < WEFT_WHEEL_LEVELS; l++)
        for (int s = 0; s < WEFT_WHEEL_SLOTS; s++) {
            weft__timer *head = &wh->slots[l][s];
            head->next = head->prev = head;
        }
}

void weft__wheel_arm(weft__wheel *wh, weft__timer *t, int64_t when)
{
    if (when < wh->elapsed)
        when = wh->elapsed; /* already due: fires at the next advance */
    t->when = when;
    unsigned level = level_for((uint64_t)wh->elapsed, (uint64_t)when);
    unsigned slot = slot_for((uint64_t)when, level);
    weft__timer *head = &wh->slots[level][slot];
    t->level = (uint16_t)level;
    t->slot = (uint16_t)slot;
    t->prev = head->prev; /* append: equal deadlines fire in arming order */
    t->next = head;
    head->prev->next = t;
    head->prev = t;
    wh->occupied[level] |= 1ull << slot;
    st_rlx(&wh->count, ld_rlx(&wh->count) + 1);
}

void weft__wheel_disarm(weft__wheel *wh, weft__timer *t)
{
    if (!t->next)
        return;
    WEFT_ASSERT_MSG(t->prev->next == t && t->next->prev == t &&
                        t->level < WEFT_WHEEL_LEVELS,
                    "a timer's links are broken");
    t->prev->next = t->next;
    t->next->prev = t->prev;
    weft__timer *head = &wh->slots[t->level][t->slot];
    if (head->next == head)
        wh->occupied[t->level] &= ~(1ull << t->slot);
    t->next = t->prev = NULL;
    st_rlx(&wh->count, ld_rlx(&wh->count) - 1);
}

/* The next occupied slot: its level, slot and start time. */
static bool next_slot(const weft__wheel *wh, unsigned *level, unsigned *slot,
                      int64_t *start)
{
    uint64_t el = (uint64_t)wh->elapsed;
    for (unsigned l = 0; l < WEFT_WHEEL_LEVELS; l++) {
        uint64_t occ = wh->occupied[l];
        if (!occ)
            continue;
        unsigned pos = slot_for(el, l);
        uint64_t ahead = occ & (~0ull << pos);
        /* The invariant keeps every timer at or after elapsed's slot. */
        unsigned s = (unsigned)__builtin_ctzll(ahead ? ahead : occ);
        unsigned shift = l * LEVEL_BITS;
        uint64_t base = 0;
        if (shift + LEVEL_BITS < 64)
            base = el & ~((1ull << (shift + LEVEL_BITS)) - 1);
        *level = l;
        *slot = s;
        *start = (int64_t)(base + ((uint64_t)s << shift));
        return true;
    }
    return false;
}

int64_t weft__wheel_next(const weft__wheel *wh)
{
    unsigned l, s;
    int64_t start;
    if (!ld_rlx(&wh->count) || !next_slot(wh, &l, &s, &start))
        return WEFT_NEVER;
    return start < wh->elapsed ? wh->elapsed : start;
}

/* Detaches a slot's list; returns its first timer (NULL-terminated). */
static weft__timer *take_slot(weft__wheel *wh, unsigned l, unsigned s)
{
    weft__timer *head = &wh->slots[l][s];
    weft__timer *first = head->next;
    if (first == head)
        return NULL;
    head->prev->next = NULL;
    head->next = head->prev = head;
    wh->occupied[l] &= ~(1ull << s);
    return first;
}

/* Re-files a higher-level slot's timers relative to the current elapsed. */
static void cascade(weft__wheel *wh, unsigned l, unsigned s)
{
    weft__timer *t = take_slot(wh, l, s);
    while (t) {
        weft__timer *next = t->next;
        st_rlx(&wh->count, ld_rlx(&wh->count) - 1);
        weft__wheel_arm(wh, t, t->when);
        t = next;
    }
}

size_t weft__wheel_advance(weft__wheel *wh, int64_t now)
{
    size_t fired = 0;
    unsigned l, s;
    int64_t start;
    wh->now = now;
    while (ld_rlx(&wh->count) && next_slot(wh, &l, &s, &start) &&
           start <= now) {
        if (start > wh->elapsed)
            wh->elapsed = start;
        if (l > 0) {
            cascade(wh, l, s);
            continue;
        }
        /* One at a time: a callback may disarm or arm other timers. */
        weft__timer *head = &wh->slots[0][s];
        while (head->next != head) {
            weft__timer *t = head->next;
            weft__wheel_disarm(wh, t);
            fired++;
            t->fn(t);
        }
    }
    if (now > wh->elapsed)
        wh->elapsed = now;
    return fired;
}

int64_t weft__wheel_next_exact(const weft__wheel *wh)
{
    unsigned l, s;
    int64_t start;
    if (!ld_rlx(&wh->count) || !next_slot(wh, &l, &s, &start))
        return WEFT_NEVER;
    if (l == 0)
        return start; /* a level-0 slot holds one exact deadline */
    /* The earliest timer is in this slot (every later level is later):
     * read the minimum without moving anything, since another worker's
     * clock may settle on an earlier time than this slot's start. */
    const weft__timer *head = &wh->slots[l][s];
    int64_t min = WEFT_NEVER;
    for (const weft__timer *t = head->next; t != head; t = t->next)
        if (t->when < min)
            min = t->when;
    return min;
}
