/* SPDX-License-Identifier: MIT */
/*
 * The result policies' tables (see policy.h): one per weft_policy, used by
 * scopes and by the future combinators alike.
 */
#include "scope/policy.h"

/* ---- WEFT_FAIL_FAST: the first failure decides, cancels the rest ---- */

static unsigned fail_fast_done(weft__policy_state *st, int index, int status,
                               bool cancelled)
{
    WEFT_UNUSED(index);
    if (status >= 0 || cancelled)
        return 0; /* a failure after a cancel is the cancel's doing */
    st->status = status;
    return WEFT__POL_DECIDED | WEFT__POL_CANCEL;
}

static int fail_fast_result(const weft__policy_state *st, int interrupted,
                            int children)
{
    WEFT_UNUSED(children);
    return st->status ? st->status : interrupted;
}

const weft__policy weft__policy_fail_fast = {
    .name = "fail-fast",
    .flags = 0,
    .done = fail_fast_done,
    .result = fail_fast_result,
};

/* ---- WEFT_COLLECT and WEFT_SERVE: every child runs to its end ---- */

static unsigned nothing_done(weft__policy_state *st, int index, int status,
                             bool cancelled)
{
    WEFT_UNUSED(st);
    WEFT_UNUSED(index);
    WEFT_UNUSED(status);
    WEFT_UNUSED(cancelled);
    return 0;
}

static int interrupted_result(const weft__policy_state *st, int interrupted,
                              int children)
{
    WEFT_UNUSED(st);
    WEFT_UNUSED(children);
    return interrupted;
}

const weft__policy weft__policy_collect = {
    .name = "collect",
    .flags = WEFT__POL_STATUSES,
    .done = nothing_done,
    .result = interrupted_result,
};

const weft__policy weft__policy_serve = {
    .name = "serve",
    .flags = WEFT__POL_UNINDEXED | WEFT__POL_REPORT,
    .done = nothing_done,
    .result = interrupted_result,
};

const weft__policy weft__policy_supervise = {
    .name = "supervise",
    .flags = WEFT__POL_UNINDEXED | WEFT__POL_INTERNAL,
    .done = nothing_done,
    .result = interrupted_result,
};

/* ---- WEFT_FIRST: the first success wins, cancels the rest ---- */

static unsigned first_done(weft__policy_state *st, int index, int status,
                           bool cancelled)
{
    if (status < 0) {
        if (st->status == 0)
            st->status = status;
        return 0;
    }
    if (st->winner >= 0 || cancelled)
        return 0;
    st->winner = index;
    return WEFT__POL_DECIDED | WEFT__POL_CANCEL;
}

static int first_result(const weft__policy_state *st, int interrupted,
                        int children)
{
    if (st->winner >= 0)
        return 0;
    if (interrupted)
        return interrupted;
    return children == 0 ? -ENOENT : st->status;
}

const weft__policy weft__policy_first = {
    .name = "first",
    .flags = WEFT__POL_SUCCESSES | WEFT__POL_STATUSES,
    .done = first_done,
    .result = first_result,
};

/* ---- WEFT_RACE: the first to finish wins, cancels the rest ---- */

static unsigned race_done(weft__policy_state *st, int index, int status,
                          bool cancelled)
{
    if (st->winner >= 0 || cancelled)
        return 0;
    st->winner = index;
    st->status = status; /* the winner's, whatever it is */
    return WEFT__POL_DECIDED | WEFT__POL_CANCEL;
}

static int race_result(const weft__policy_state *st, int interrupted,
                       int children)
{
    if (st->winner >= 0)
        return st->status;
    if (interrupted)
        return interrupted;
    return children == 0 ? -ENOENT : 0;
}

const weft__policy weft__policy_race = {
    .name = "race",
    .flags = WEFT__POL_SUCCESSES | WEFT__POL_STATUSES,
    .done = race_done,
    .result = race_result,
};

/* ---- by weft_policy ---- */

static const weft__policy *const by_policy[] = {
    [WEFT_FAIL_FAST] = &weft__policy_fail_fast,
    [WEFT_COLLECT] = &weft__policy_collect,
    [WEFT_FIRST] = &weft__policy_first,
    [WEFT_RACE] = &weft__policy_race,
    [WEFT_SERVE] = &weft__policy_serve,
};

const weft__policy *weft__policy_of(weft_policy p)
{
    if ((int)p == WEFT__POLICY_SUPERVISE)
        return &weft__policy_supervise;
    if ((unsigned)p >= sizeof(by_policy) / sizeof(by_policy[0]))
        return NULL;
    return by_policy[p];
}
