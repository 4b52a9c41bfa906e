/* SPDX-License-Identifier: MIT */
/*
 * Result policies as data: what a group of children (a scope's tasks, a
 * combinator's futures) decides as they finish, and what it returns.
 *
 * A policy is a table (weft__policy): flags, and two functions over a
 * small state (weft__policy_state) that its user keeps under its own lock:
 *
 *   done(state, index, status, cancelled) -> verdict
 *       Child `index` finished with `status` (>= 0 success, < 0 failure);
 *       `cancelled`: the group was cancelled before (a winner, a failure,
 *       its deadline, from outside). Updates the state and says whether
 *       the group's result is now known (WEFT__POL_DECIDED) and whether
 *       the children still running are to be cancelled (WEFT__POL_CANCEL).
 *       Called for every failure, and for successes only if the policy
 *       has WEFT__POL_SUCCESSES (weft__policy_child_done applies that
 *       rule inline, so a policy indifferent to successes costs a task's
 *       exit no call).
 *   result(state, interrupted, children) -> the group's result
 *       Once every child is accounted for. `interrupted`: 0, or the code
 *       of what stopped the group before it was decided (a scope's
 *       deadline -ETIMEDOUT, a cancel from outside -ECANCELED; a
 *       combinator's deadline or its task's cancel); `children`: how many
 *       the group had.
 *
 * Users: scopes hold one table per weft_policy (weft__policy_of); the
 * future combinators use the same tables (future.c: await and all are
 * FAIL_FAST, all_settled COLLECT, any FIRST, race RACE), returning the
 * winner's index where a policy picks a winner. What is not a policy's
 * stays with its user: a scope's per-child status array (kept if the
 * table says WEFT__POL_STATUSES), its failure count, its children's
 * indexes and a child cancelled alone through its handle (which no policy
 * sees); a combinator's statuses array and the futures it gives up on.
 *
 * Adding a policy (a supervisor, say) is adding a table here and its
 * entry in weft__policy_of: neither scope.c nor future.c switches on the
 * policy.
 *
 * Included by scope.h, before struct weft_scope,
 * which embeds the state: it needs only weft.h's types.
 */
#ifndef WEFT_POLICY_H
#define WEFT_POLICY_H

#include "util/util.h"

/* What a policy keeps. */
typedef struct weft__policy_state {
    int winner; /* the child that decided the group (FIRST, RACE), -1: none */
    int status; /* FAIL_FAST, FIRST: the first failure (0: none);
                 * RACE: the winner's status */
} weft__policy_state;

/* done()'s verdict (bits). */
enum {
    WEFT__POL_DECIDED = 1, /* the group's result is known */
    WEFT__POL_CANCEL = 2,  /* cancel the children still running */
};

/* A policy's flags. */
enum {
    WEFT__POL_SUCCESSES = 1, /* done() wants successes too */
    WEFT__POL_STATUSES = 2,  /* a scope keeps every child's status */
    WEFT__POL_UNINDEXED = 4, /* a scope's children have no index (all 0):
                              * it counts them (stopping at INT_MAX) and
                              * keeps no status */
    WEFT__POL_REPORT = 8,    /* a scope reports each failure as it happens
                              * (weft_scope_opts.on_failure, or stderr) */
    WEFT__POL_INTERNAL = 16, /* not a weft_policy: weft_scope_open refuses
                              * it, weft__scope_open_internal takes it */
};

/* The internal policies' values of weft_policy, past the public enum's. */
enum {
    /* A supervisor's children (supervisor.c): independent, a failure
     * cancels nobody and is reported to nobody (the supervisor hears of
     * it from the child itself), nothing kept per child, unindexed. */
    WEFT__POLICY_SUPERVISE = 32,
};

typedef struct weft__policy {
    const char *name;
    unsigned flags; /* WEFT__POL_* */
    unsigned (*done)(weft__policy_state *st, int index, int status,
                     bool cancelled);
    int (*result)(const weft__policy_state *st, int interrupted, int children);
} weft__policy;

extern const weft__policy weft__policy_fail_fast, weft__policy_collect,
    weft__policy_first, weft__policy_race, weft__policy_serve,
    weft__policy_supervise;

/* The table of p (a public policy or an internal one), or NULL if p is
 * not a policy. */
const weft__policy *weft__policy_of(weft_policy p);

/* A group's state before its first child finishes. */
static inline void weft__policy_start(weft__policy_state *st)
{
    st->winner = -1;
    st->status = 0;
}

/* Child `index` finished with `status`: done() if the policy looks at
 * it; the verdict. */
static inline unsigned weft__policy_child_done(const weft__policy *p,
                                               weft__policy_state *st,
                                               int index, int status,
                                               bool cancelled)
{
    if (status >= 0 && !(p->flags & WEFT__POL_SUCCESSES))
        return 0;
    return p->done(st, index, status, cancelled);
}

#endif
