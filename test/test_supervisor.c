/* SPDX-License-Identifier: MIT */
/*
 * Supervisors (weft.h section 13), after OTP's supervisor_SUITE: each
 * strategy restarts exactly the right children in the right order (the
 * children's starts and ends are logged and the log compared whole),
 * restart types, intensity and escalation through nested supervisors,
 * shutdown order and timing, backoff instants, run-time children, stop
 * from another task, and random crashes on two workers. Every timing is
 * on the virtual clock.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "t.h"

#define MS WEFT_MSEC
#define WEFT_UNUSED_T(x) ((void)(x))

/* ---- the log ---- */

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char log_buf[8192];

static void logf_(const char *fmt, const char *name, long long t)
{
    char one[64];
    snprintf(one, sizeof one, fmt, name, t);
    pthread_mutex_lock(&log_mu);
    size_t n = strlen(log_buf);
    snprintf(log_buf + n, sizeof log_buf - n, "%s%s", n ? " " : "", one);
    pthread_mutex_unlock(&log_mu);
}
#define LOG(fmt, name) logf_(fmt, name, (long long)(weft_now() / MS))

static void log_reset(void)
{
    log_buf[0] = 0;
}

#define ASSERT_LOG(want)                                                       \
    do {                                                                       \
        if (strcmp(log_buf, want) != 0)                                        \
            T_FAIL("log\n  got:  %s\n  want: %s", log_buf, want);              \
    } while (0)

/* On two workers, children started one after the other may first run
 * in either order: if the log starts with y then x, it is made to start
 * with x then y (both the same length), so a test can assert the rest. */
static void log_either_first(const char *x, const char *y)
{
    size_t nx = strlen(x), ny = strlen(y);
    if (nx == ny && strncmp(log_buf, y, ny) == 0 &&
        strncmp(log_buf + ny, x, nx) == 0) {
        memcpy(log_buf, x, nx);
        memcpy(log_buf + nx, y, ny);
    }
}

/* ---- children ---- */

/* One start of a child: what it does. */
typedef struct step {
    int64_t run;    /* ns before it returns by itself; < 0: until stopped */
    int status;     /* what it returns then */
    int64_t linger; /* ns it takes to finish once its stop hook ran */
} step;

#define NSTEPS 8
typedef struct kid {
    const char *name;
    step plan[NSTEPS]; /* start i follows plan[i] (the last one repeats) */
    int starts;
    int ignore; /* 1: its stop hook does nothing */
    /* The hook runs on the supervisor's task, maybe on another worker and
     * before the start it stops has begun: it touches only these two. */
    _Atomic int stop_asked;
    weft_sem stop; /* a permit: stop */
    int log_time;  /* log entries carry the instant: "a+@100" */
} kid;

/* Start i's step: plan[i], or the last step given (an empty one, all
 * zero, repeats the one before). */
static step plan_step(const kid *k, int i)
{
    if (i >= NSTEPS)
        i = NSTEPS - 1;
    while (i > 0 && k->plan[i].run == 0 && k->plan[i].status == 0 &&
           k->plan[i].linger == 0)
        i--;
    return k->plan[i];
}

static int kid_fn(void *arg)
{
    kid *k = arg;
    int i = k->starts++;
    step st = plan_step(k, i);
    LOG(k->log_time ? "%s+@%lld" : "%s+", k->name);
    int rc;
    if (st.run >= 0) {
        rc = weft_sleep_for(st.run);
        if (rc == 0) {
            LOG(k->log_time ? (st.status < 0 ? "%s*@%lld" : "%s.@%lld")
                            : (st.status < 0 ? "%s*" : "%s."),
                k->name);
            return st.status;
        }
    } else {
        rc = weft_sem_acquire(&k->stop, 1);
        if (rc == 0 && st.linger > 0)
            rc = weft_sleep_for(st.linger);
        if (rc == 0) {
            LOG(k->log_time ? "%s-@%lld" : "%s-", k->name);
            return 0;
        }
    }
    LOG(k->log_time ? "%s!@%lld" : "%s!", k->name); /* cancelled */
    return rc;
}

static void kid_stop(void *arg)
{
    kid *k = arg;
    k->stop_asked++;
    if (!k->ignore)
        weft_sem_release(&k->stop, 1);
}

static weft_child_spec spec_of(kid *k, weft_restart r, int64_t shutdown)
{
    return (weft_child_spec){.name = k->name,
                             .start = kid_fn,
                             .arg = k,
                             .restart = r,
                             .shutdown_ns = shutdown,
                             .stop = kid_stop};
}

/* ---- events ---- */

static char ev_buf[4096];
static const char *kind_name[] = {"exit", "restart", "give_up", "escalate"};

static void on_event(void *ctx, const weft_sup_event *e)
{
    WEFT_UNUSED_T(ctx);
    char one[96];
    snprintf(one, sizeof one, "%s:%s:%s(%d,%d)", e->supervisor,
             kind_name[e->kind], e->child, e->status, e->restarts);
    pthread_mutex_lock(&log_mu);
    size_t n = strlen(ev_buf);
    snprintf(ev_buf + n, sizeof ev_buf - n, "%s%s", n ? " " : "", one);
    pthread_mutex_unlock(&log_mu);
}

/* ---- a supervisor run from the root task, stopped at an instant ---- */

typedef struct run_ctx {
    weft_sup_opts o;
    weft_child_spec specs[8];
    int n;
    weft_time stop_at; /* WEFT_NEVER: not stopped */
    int result;
    weft_time returned_at;
    long restarts;
} run_ctx;

static int stopper(void *arg)
{
    run_ctx *r = arg;
    weft_sup *s;
    int rc = weft_sup_spawn(NULL, &r->o, r->specs, r->n, &s);
    if (rc)
        return rc;
    if (r->stop_at != WEFT_NEVER) {
        int st;
        rc = weft_sup_join_until(s, &st, r->stop_at);
        if (rc == -ETIMEDOUT) {
            weft_sup_stats ss;
            weft_sup_stats_get(s, &ss);
            r->restarts = ss.restarts;
            LOG("stop", "");
            ASSERT_EQ(weft_sup_stop(s), 0);
        }
    }
    ASSERT_EQ(weft_sup_join_until(s, &r->result, WEFT_NEVER), 0);
    r->returned_at = weft_now();
    weft_sup_stats ss;
    ASSERT_EQ(weft_sup_stats_get(s, &ss), 0);
    if (r->stop_at == WEFT_NEVER)
        r->restarts = ss.restarts;
    ASSERT_EQ(weft_sup_stop(s), -ESRCH);
    ASSERT_EQ(weft_sup_free(s), 0);
    return 0;
}

static void run_sup(run_ctx *r, int workers)
{
    log_reset();
    ev_buf[0] = 0;
    ASSERT_EQ(t_run_virtual(workers, stopper, r), 0);
}

/* ---- strategies ---- */

static void strategy_case(weft_sup_strategy strategy, const char *want)
{
    kid a = {.name = "a", .plan = {{-1, 0, 0}}};
    kid b = {.name = "b", .plan = {{10 * MS, -EIO, 0}, {-1, 0, 0}}};
    kid c = {.name = "c", .plan = {{-1, 0, 0}}};
    run_ctx r = {.o = {.strategy = strategy,
                       .intensity = 3,
                       .period_ns = WEFT_SEC,
                       .name = "s",
                       .on_event = on_event},
                 .n = 3,
                 .stop_at = 100 * MS};
    r.specs[0] = spec_of(&a, WEFT_PERMANENT, 10 * MS);
    r.specs[1] = spec_of(&b, WEFT_PERMANENT, 10 * MS);
    r.specs[2] = spec_of(&c, WEFT_PERMANENT, 10 * MS);
    run_sup(&r, 1);
    ASSERT_LOG(want);
    ASSERT_EQ(r.result, 0);
    ASSERT_EQ(r.restarts, 1);
}

TEST(one_for_one)
{
    strategy_case(WEFT_ONE_FOR_ONE, "a+ b+ c+ b* b+ stop c- b- a-");
    if (strstr(ev_buf, "s:exit:b(-5,0) s:restart:b(-5,1)") != ev_buf)
        T_FAIL("events: %s", ev_buf);
}

TEST(one_for_all)
{
    strategy_case(WEFT_ONE_FOR_ALL, "a+ b+ c+ b* c- a- a+ b+ c+ stop c- b- a-");
}

TEST(rest_for_one)
{
    strategy_case(WEFT_REST_FOR_ONE, "a+ b+ c+ b* c- b+ c+ stop c- b- a-");
}

TEST(rest_for_one_last_and_first)
{
    /* The last child's group is itself; the first's is everyone. */
    kid a = {.name = "a", .plan = {{20 * MS, -EIO, 0}, {-1, 0, 0}}};
    kid b = {.name = "b", .plan = {{-1, 0, 0}}};
    kid c = {.name = "c", .plan = {{10 * MS, -EIO, 0}, {-1, 0, 0}}};
    run_ctx r = {.o = {.strategy = WEFT_REST_FOR_ONE, .intensity = -1},
                 .n = 3,
                 .stop_at = 100 * MS};
    r.specs[0] = spec_of(&a, WEFT_PERMANENT, 10 * MS);
    r.specs[1] = spec_of(&b, WEFT_PERMANENT, 10 * MS);
    r.specs[2] = spec_of(&c, WEFT_PERMANENT, 10 * MS);
    run_sup(&r, 1);
    ASSERT_LOG("a+ b+ c+ c* c+ a* c- b- a+ b+ c+ stop c- b- a-");
    ASSERT_EQ(r.restarts, 2);
}

/* ---- restart types ---- */

TEST(restart_types)
{
    /* transient: a failure is restarted, a normal exit is not; temporary:
     * never restarted, and removed (terminate_child then says -ENOENT). */
    kid t = {.name = "t", .plan = {{10 * MS, -EIO, 0}, {20 * MS, 0, 0}}};
    kid p = {.name = "p", .plan = {{40 * MS, 0, 0}, {-1, 0, 0}}};
    kid x = {.name = "x", .plan = {{5 * MS, -EIO, 0}}};
    run_ctx r = {.o = {.strategy = WEFT_ONE_FOR_ONE,
                       .intensity = 10,
                       .period_ns = WEFT_SEC,
                       .on_event = on_event},
                 .n = 3,
                 .stop_at = 100 * MS};
    r.specs[0] = spec_of(&t, WEFT_TRANSIENT, 10 * MS);
    r.specs[1] = spec_of(&p, WEFT_PERMANENT, 10 * MS);
    r.specs[2] = spec_of(&x, WEFT_TEMPORARY, 10 * MS);
    run_sup(&r, 1);
    /* t's second run ends normally at 30 ms: not restarted; p exits
     * normally at 40 ms and, permanent, is restarted. */
    ASSERT_LOG("t+ p+ x+ x* t* t+ t. p. p+ stop p-");
    ASSERT_EQ(r.restarts, 2);
    ASSERT_EQ(t.starts, 2);
    ASSERT_EQ(x.starts, 1);
    const char *want = ":exit:x(-5,0) :give_up:x(-5,0) :exit:t(-5,0) "
                       ":restart:t(-5,1) :exit:t(0,1) :give_up:t(0,1) "
                       ":exit:p(0,1) :restart:p(0,2)";
    if (strcmp(ev_buf, want) != 0)
        T_FAIL("events\n  got:  %s\n  want: %s", ev_buf, want);
}

/* ---- intensity ---- */

TEST(fails_at_once_gives_up)
{
    /* The defaults (1 restart in 5 s): a child that fails as soon as it
     * starts is restarted once, then the supervisor gives up, stopping
     * the others in reverse order. */
    kid a = {.name = "a", .plan = {{-1, 0, 0}}};
    kid b = {.name = "b", .plan = {{0, -EIO, 0}}};
    kid c = {.name = "c", .plan = {{-1, 0, 0}}};
    run_ctx r = {.o = {.on_event = on_event}, .n = 3, .stop_at = WEFT_NEVER};
    r.specs[0] = spec_of(&a, WEFT_PERMANENT, 10 * MS);
    r.specs[1] = spec_of(&b, WEFT_PERMANENT, 10 * MS);
    r.specs[2] = spec_of(&c, WEFT_PERMANENT, 10 * MS);
    run_sup(&r, 1);
    ASSERT_EQ(r.result, -ECHILD);
    ASSERT_EQ(r.returned_at, 0);
    ASSERT_LOG("a+ b+ b* c+ b+ b* c- a-");
    ASSERT_EQ(r.restarts, 1);
    const char *want = ":exit:b(-5,0) :restart:b(-5,1) :exit:b(-5,1) "
                       ":escalate:b(-5,2)";
    if (strcmp(ev_buf, want) != 0)
        T_FAIL("events\n  got:  %s\n  want: %s", ev_buf, want);
}

TEST(intensity_window_slides)
{
    /* 2 restarts in 100 ms: failures every 60 ms never put 3 in a window;
     * failures 30 ms apart do. */
    kid a = {.name = "a",
             .plan = {{60 * MS, -EIO, 0},
                      {60 * MS, -EIO, 0},
                      {60 * MS, -EIO, 0},
                      {60 * MS, -EIO, 0},
                      {30 * MS, -EIO, 0}}};
    run_ctx r = {.o = {.intensity = 2, .period_ns = 100 * MS},
                 .n = 1,
                 .stop_at = WEFT_NEVER};
    r.specs[0] = spec_of(&a, WEFT_PERMANENT, 10 * MS);
    run_sup(&r, 1);
    ASSERT_EQ(r.result, -ECHILD);
    /* Restarts at 60, 120, 180, 240 (60 ms apart: at most two in a
     * window of 100 ms); the failure at 270 would make 180, 240, 270
     * three within 100 ms. */
    ASSERT_EQ(r.returned_at, 270 * MS);
    ASSERT_EQ(r.restarts, 4);
}

/* Escalation: top > mid > leaf > w, where w fails at once. */
static kid w_kid = {.name = "w", .plan = {{0, -EIO, 0}}};

static int leaf_sup(void *arg)
{
    WEFT_UNUSED_T(arg);
    weft_child_spec c = spec_of(&w_kid, WEFT_PERMANENT, 10 * MS);
    weft_sup_opts o = {.name = "leaf", .on_event = on_event};
    return weft_sup_run(&o, &c, 1);
}

static int mid_sup(void *arg)
{
    WEFT_UNUSED_T(arg);
    weft_child_spec c = {.name = "leaf",
                         .start = leaf_sup,
                         .shutdown_ns = WEFT_SHUTDOWN_INFINITY};
    weft_sup_opts o = {.name = "mid", .on_event = on_event};
    return weft_sup_run(&o, &c, 1);
}

static int top_sup(void *arg)
{
    int *result = arg;
    weft_child_spec c = {
        .name = "mid", .start = mid_sup, .shutdown_ns = WEFT_SHUTDOWN_INFINITY};
    weft_sup_opts o = {.name = "top",
                       .intensity = 0,
                       .period_ns = WEFT_SEC,
                       .on_event = on_event};
    *result = weft_sup_run(&o, &c, 1);
    return 0;
}

TEST(escalation_two_levels)
{
    ev_buf[0] = 0;
    log_reset();
    int result = 0;
    ASSERT_EQ(t_run_virtual(1, top_sup, &result), 0);
    ASSERT_EQ(result, -ECHILD);
    const char *leaf = "leaf:exit:w(-5,0) leaf:restart:w(-5,1) "
                       "leaf:exit:w(-5,1) leaf:escalate:w(-5,2) ";
    char want[1024];
    snprintf(want, sizeof want,
             "%smid:exit:leaf(-10,0) mid:restart:leaf(-10,1) "
             "%smid:exit:leaf(-10,1) mid:escalate:leaf(-10,2) "
             "top:exit:mid(-10,0) top:escalate:mid(-10,1)",
             leaf, leaf);
    if (strcmp(ev_buf, want) != 0)
        T_FAIL("events\n  got:  %s\n  want: %s", ev_buf, want);
    ASSERT_EQ(w_kid.starts, 4);
}

/* ---- shutdown ---- */

TEST(shutdown_order_and_times)
{
    /* Stopped at 1 s, in reverse order: d (INFINITY, its hook makes it
     * take 200 ms), c (BRUTAL: cancelled at once, its hook not called),
     * b (ignores its hook: cancelled exactly 50 ms later), a (its hook). */
    kid a = {.name = "a", .plan = {{-1, 0, 0}}, .log_time = 1};
    kid b = {.name = "b", .plan = {{-1, 0, 0}}, .ignore = 1, .log_time = 1};
    kid c = {.name = "c", .plan = {{-1, 0, 0}}, .log_time = 1};
    kid d = {.name = "d", .plan = {{-1, 0, 200 * MS}}, .log_time = 1};
    run_ctx r = {.n = 4, .stop_at = WEFT_SEC};
    r.specs[0] = spec_of(&a, WEFT_PERMANENT, 10 * MS);
    r.specs[1] = spec_of(&b, WEFT_PERMANENT, 50 * MS);
    r.specs[2] = spec_of(&c, WEFT_PERMANENT, WEFT_SHUTDOWN_BRUTAL);
    r.specs[3] = spec_of(&d, WEFT_PERMANENT, WEFT_SHUTDOWN_INFINITY);
    run_sup(&r, 1);
    ASSERT_LOG("a+@0 b+@0 c+@0 d+@0 stop d-@1200 c!@1200 b!@1250 a-@1250");
    ASSERT_EQ(c.stop_asked, 0);
    ASSERT_EQ(b.stop_asked, 1);
    ASSERT_EQ(r.result, 0);
    ASSERT_EQ(r.returned_at, 1250 * MS);
}

TEST(stop_during_backoff_does_not_wait)
{
    static const weft_retry bo = {.base_ns = 10 * WEFT_SEC};
    kid a = {.name = "a", .plan = {{100 * MS, -EIO, 0}}};
    run_ctx r = {
        .o = {.intensity = -1, .backoff = &bo}, .n = 1, .stop_at = WEFT_SEC};
    r.specs[0] = spec_of(&a, WEFT_PERMANENT, 10 * MS);
    run_sup(&r, 1);
    ASSERT_LOG("a+ a* stop");
    ASSERT_EQ(r.returned_at, WEFT_SEC);
    ASSERT_EQ(a.starts, 1);
}

/* A cancel of the supervisor's scope stops it as weft_sup_stop does: in
 * order, with the children's shutdown times, not cut short. */
static int cancelled_root(void *arg)
{
    run_ctx *r = arg;
    weft_scope *sc;
    ASSERT_EQ(weft_scope_open(&sc, NULL), 0);
    weft_sup *s;
    ASSERT_EQ(weft_sup_spawn(sc, &r->o, r->specs, r->n, &s), 0);
    weft_sleep_for(WEFT_SEC);
    LOG("cancel", "");
    weft_scope_cancel(sc);
    ASSERT_EQ(weft_scope_join(sc), -ECANCELED);
    r->returned_at = weft_now();
    ASSERT_EQ(weft_sup_join_until(s, &r->result, WEFT_NEVER), 0);
    ASSERT_EQ(weft_sup_free(s), 0);
    weft_scope_free(sc);
    return 0;
}

TEST(cancel_stops_in_order)
{
    kid a = {.name = "a", .plan = {{-1, 0, 30 * MS}}, .log_time = 1};
    kid b = {.name = "b", .plan = {{-1, 0, 0}}, .ignore = 1, .log_time = 1};
    run_ctx r = {.n = 2};
    r.specs[0] = spec_of(&a, WEFT_PERMANENT, WEFT_SHUTDOWN_INFINITY);
    r.specs[1] = spec_of(&b, WEFT_PERMANENT, 50 * MS);
    log_reset();
    ASSERT_EQ(t_run_virtual(2, cancelled_root, &r), 0);
    log_either_first("a+@0 ", "b+@0 "); /* the stop is what is ordered */
    ASSERT_LOG("a+@0 b+@0 cancel b!@1050 a-@1080");
    ASSERT_EQ(r.result, 0);
    ASSERT_EQ(r.returned_at, 1080 * MS);
}

/* ---- backoff ---- */

static weft_time starts_at[16];
static int nstarts;

static int timed_child(void *arg)
{
    const int64_t *runs = arg;
    int i = nstarts++;
    starts_at[i] = weft_now();
    if (runs[i] < 0)
        return weft_event_wait(&(weft_event){0}) ? -ECANCELED : 0;
    weft_sleep_for(runs[i]);
    return -EIO;
}

TEST(backoff_instants)
{
    /* base 100 ms, doubling, cap 400 ms, no jitter; reset after 500 ms of
     * health. The child fails at once 4 times, then runs 600 ms, fails,
     * then fails at once again. */
    static const weft_retry bo = {.base_ns = 100 * MS, .cap_ns = 400 * MS};
    static const int64_t runs[] = {0, 0, 0, 0, 600 * MS, 0, -1};
    weft_child_spec c = {.name = "c",
                         .start = timed_child,
                         .arg = (void *)runs,
                         .shutdown_ns = WEFT_SHUTDOWN_BRUTAL};
    run_ctx r = {.o = {.intensity = -1,
                       .backoff = &bo,
                       .backoff_reset_ns = 500 * MS,
                       .on_event = on_event},
                 .n = 1,
                 .stop_at = 3 * WEFT_SEC};
    r.specs[0] = c;
    nstarts = 0;
    run_sup(&r, 1);
    static const int64_t want[] = {0, 100, 300, 700, 1100, 1800, 2000};
    ASSERT_EQ(nstarts, 7);
    for (int i = 0; i < 7; i++)
        ASSERT_EQ(starts_at[i], want[i] * MS);
    ASSERT_EQ(r.restarts, 6);
    /* The delays as the events told them. */
    ASSERT(strstr(ev_buf, ":restart:c(-5,0)") != NULL); /* unlimited: 0 */
}

/* ---- children at run time ---- */

typedef struct dyn_ctx {
    kid k[4];
} dyn_ctx;

static int dynamic_root(void *arg)
{
    dyn_ctx *d = arg;
    weft_sup_opts o = {.strategy = WEFT_DYNAMIC, .max_children = 2};
    weft_sup *s;
    ASSERT_EQ(weft_sup_spawn(NULL, &o, NULL, 0, &s), 0);
    weft_child_spec c0 = spec_of(&d->k[0], WEFT_PERMANENT, 10 * MS);
    weft_child_spec c1 = spec_of(&d->k[1], WEFT_TRANSIENT, 10 * MS);
    weft_child_spec c2 = spec_of(&d->k[2], WEFT_PERMANENT, 10 * MS);
    ASSERT_EQ(weft_sup_start_child(s, &c0), 0);
    ASSERT_EQ(weft_sup_start_child(s, &c0), -EEXIST);
    ASSERT_EQ(weft_sup_start_child(s, &c1), 0);
    ASSERT_EQ(weft_sup_start_child(s, &c2), -EMFILE);
    weft_child_spec bad = c2;
    bad.start = NULL;
    ASSERT_EQ(weft_sup_start_child(s, &bad), -EINVAL);
    ASSERT_EQ(weft_sup_start_child(NULL, &c2), -EINVAL);
    weft_sup_stats ss;
    ASSERT_EQ(weft_sup_stats_get(s, &ss), 0);
    ASSERT_EQ(ss.running, 2);
    ASSERT_EQ(ss.restarts, 0);
    weft_sleep_for(10 * MS);
    LOG("term", "");
    ASSERT_EQ(weft_sup_terminate_child(s, "a"), 0);
    ASSERT_EQ(weft_sup_terminate_child(s, "a"), -ENOENT);
    ASSERT_EQ(weft_sup_stats_get(s, &ss), 0);
    ASSERT_EQ(ss.running, 1);
    ASSERT_EQ(weft_sup_start_child(s, &c2), 0); /* room again */
    ASSERT_EQ(weft_sup_free(s), -EBUSY);
    ASSERT_EQ(weft_sup_stop(s), 0);
    int st;
    ASSERT_EQ(weft_sup_join_until(s, &st, WEFT_NEVER), 0);
    ASSERT_EQ(st, 0);
    ASSERT_EQ(weft_sup_start_child(s, &c0), -ESRCH);
    ASSERT_EQ(weft_sup_terminate_child(s, "b"), -ESRCH);
    ASSERT_EQ(weft_sup_free(s), 0);
    return 0;
}

TEST(start_and_terminate_child)
{
    dyn_ctx d = {.k = {{.name = "a", .plan = {{-1, 0, 0}}},
                       {.name = "b", .plan = {{-1, 0, 0}}},
                       {.name = "c", .plan = {{-1, 0, 0}}}}};
    log_reset();
    ASSERT_EQ(t_run_virtual(2, dynamic_root, &d), 0);
    log_either_first("a+ ", "b+ ");
    ASSERT_LOG("a+ b+ term a- c+ c- b-");
}

TEST(bad_arguments)
{
    kid a = {.name = "a"};
    weft_child_spec c[2] = {spec_of(&a, WEFT_PERMANENT, 0),
                            spec_of(&a, WEFT_PERMANENT, 0)};
    weft_sup *s;
    /* Outside a task. */
    ASSERT_EQ(weft_sup_run(NULL, c, 1), -EPERM);
    ASSERT_EQ(weft_sup_spawn(NULL, NULL, c, 1, &s), -EPERM);
    ASSERT(weft_sup_current() == NULL);
    ASSERT_EQ(weft_sup_stop(NULL), -EINVAL);
    weft_sup_stats ss;
    ASSERT_EQ(weft_sup_stats_get(NULL, NULL), -EINVAL);
    ASSERT_EQ(weft_sup_stats_get(NULL, &ss), -EINVAL);
    ASSERT_EQ(weft_sup_free(NULL), -EINVAL);
    ASSERT_EQ(weft_sup_join_until(NULL, NULL, 0), -EINVAL);
    /* Checks before anything starts (no task needed for them). */
    ASSERT_EQ(weft_sup_spawn(NULL, NULL, c, 2, &s), -EINVAL); /* same name */
    ASSERT_EQ(weft_sup_spawn(NULL, NULL, NULL, 1, &s), -EINVAL);
    weft_sup_opts o = {.intensity = 3}; /* no period */
    ASSERT_EQ(weft_sup_spawn(NULL, &o, c, 1, &s), -EINVAL);
    o = (weft_sup_opts){.strategy = 7};
    ASSERT_EQ(weft_sup_spawn(NULL, &o, c, 1, &s), -EINVAL);
    o = (weft_sup_opts){.strategy = WEFT_DYNAMIC, .max_children = 1};
    ASSERT_EQ(weft_sup_spawn(NULL, &o, c, 2, &s), -EINVAL);
    weft_child_spec bad = c[0];
    bad.shutdown_ns = -2;
    ASSERT_EQ(weft_sup_spawn(NULL, NULL, &bad, 1, &s), -EINVAL);
    bad = c[0];
    bad.name = NULL;
    ASSERT_EQ(weft_sup_spawn(NULL, NULL, &bad, 1, &s), -EINVAL);
    static const weft_actor_opts ao = {0};
    bad = c[0];
    bad.start = NULL;
    bad.actor = &ao; /* actor children: not yet */
    ASSERT_EQ(weft_sup_spawn(NULL, NULL, &bad, 1, &s), -EINVAL);
}

/* weft_sup_current on the supervisor's task (its event handler); stop
 * from there. */
static int current_seen;

static void stop_on_exit(void *ctx, const weft_sup_event *e)
{
    WEFT_UNUSED_T(ctx);
    weft_sup *s = weft_sup_current();
    ASSERT(s != NULL);
    current_seen++;
    if (e->kind == WEFT_SUP_EXIT) {
        weft_child_spec c = {.name = "z", .start = kid_fn};
        ASSERT_EQ(weft_sup_start_child(s, &c), -EDEADLK);
        ASSERT_EQ(weft_sup_stop(s), 0);
    }
}

static int current_root(void *arg)
{
    WEFT_UNUSED_T(arg);
    kid a = {.name = "a", .plan = {{10 * MS, 0, 0}, {-1, 0, 0}}};
    weft_child_spec c = spec_of(&a, WEFT_PERMANENT, 10 * MS);
    weft_sup_opts o = {.on_event = stop_on_exit};
    ASSERT(weft_sup_current() == NULL);
    /* The internal policy is no public one. */
    weft_scope *sc;
    ASSERT_EQ(
        weft_scope_open(&sc, &(weft_scope_opts){.policy = (weft_policy)32}),
        -EINVAL);
    ASSERT_EQ(weft_sup_run(&o, &c, 1), 0);
    ASSERT(weft_sup_current() == NULL);
    /* The stop came during the exit's handling: the restart went on. */
    ASSERT_EQ(a.starts, 2);
    return 0;
}

TEST(current_and_stop_from_handler)
{
    current_seen = 0;
    ASSERT_EQ(t_run_virtual(1, current_root, NULL), 0);
    ASSERT_EQ(current_seen, 2); /* exit, restart */
}

/* start_child cancelled before the supervisor takes it adds nothing. */
static int cancel_caller(void *arg)
{
    weft_sup *s = arg;
    kid *k = calloc(1, sizeof(*k));
    k->name = "late";
    k->plan[0] = (step){-1, 0, 0};
    weft_child_spec c = spec_of(k, WEFT_PERMANENT, 0);
    int rc = weft_sup_start_child(s, &c);
    free(k);
    return rc == -ECANCELED ? 0 : -1;
}

static int cancel_start_root(void *arg)
{
    WEFT_UNUSED_T(arg);
    /* b fails at 10 ms; one_for_all stops a, which takes 1 s to go:
     * meanwhile the supervisor takes no request. */
    kid a = {.name = "a", .plan = {{-1, 0, WEFT_SEC}}};
    kid b = {.name = "b", .plan = {{10 * MS, -EIO, 0}, {-1, 0, 0}}};
    weft_child_spec c[2] = {spec_of(&a, WEFT_PERMANENT, WEFT_SEC * 2),
                            spec_of(&b, WEFT_PERMANENT, 0)};
    weft_sup_opts o = {.strategy = WEFT_ONE_FOR_ALL, .intensity = -1};
    weft_sup *s;
    ASSERT_EQ(weft_sup_spawn(NULL, &o, c, 2, &s), 0);
    weft_sleep_for(20 * MS);
    ASSERT_EQ(weft_call_for(cancel_caller, s, 100 * MS), 0);
    weft_sup_stats ss;
    ASSERT_EQ(weft_sup_stats_get(s, &ss), 0);
    ASSERT_EQ(ss.running, 1); /* a, still stopping */
    weft_sleep_for(2 * WEFT_SEC);
    ASSERT_EQ(weft_sup_terminate_child(s, "late"), -ENOENT);
    ASSERT_EQ(weft_sup_stats_get(s, &ss), 0);
    ASSERT_EQ(ss.running, 2);
    weft_sup_stop(s);
    ASSERT_EQ(weft_sup_join_until(s, NULL, WEFT_NEVER), 0);
    ASSERT_EQ(weft_sup_free(s), 0);
    return 0;
}

TEST(start_child_cancelled_adds_nothing)
{
    ASSERT_EQ(t_run_virtual(1, cancel_start_root, NULL), 0);
}

/* ---- random crashes on two workers ---- */

typedef struct crash_ctx {
    _Atomic long crashes;
    long target;
    weft_sup *sup;
    _Atomic int stopped;
} crash_ctx;

typedef struct crasher {
    crash_ctx *cx;
    uint64_t rng;
    char name[16];
} crasher;

static uint64_t xorshift(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static int crasher_fn(void *arg)
{
    crasher *c = arg;
    /* c->rng is only touched by this child, one start at a time. */
    for (;;) {
        uint64_t r = xorshift(&c->rng);
        int rc = weft_sleep_for((int64_t)(r % 1000) * WEFT_USEC);
        if (rc)
            return rc;
        if (r % 4 == 0) {
            weft_yield();
            continue;
        }
        long n = atomic_fetch_add(&c->cx->crashes, 1) + 1;
        if (n == c->cx->target)
            weft_sup_stop(c->cx->sup);
        return r % 3 ? -EIO : 0;
    }
}

static int crash_root(void *arg)
{
    crash_ctx *cx = arg;
    enum { N = 8 };
    crasher cs[N];
    weft_child_spec specs[N];
    for (int i = 0; i < N; i++) {
        cs[i] = (crasher){.cx = cx, .rng = 0x9E3779B97F4A7C15ull * (i + 1)};
        snprintf(cs[i].name, sizeof cs[i].name, "c%d", i);
        specs[i] = (weft_child_spec){
            .name = cs[i].name,
            .start = crasher_fn,
            .arg = &cs[i],
            .restart = i % 3 == 2 ? WEFT_TRANSIENT : WEFT_PERMANENT,
            .shutdown_ns = i % 2 ? WEFT_SHUTDOWN_BRUTAL : 10 * MS};
    }
    static const weft_retry bo = {.base_ns = 50 * WEFT_USEC,
                                  .cap_ns = 2 * MS,
                                  .jitter = WEFT_JITTER_FULL,
                                  .seed = 7};
    weft_sup_opts o = {.strategy = (weft_sup_strategy)(cx->target % 3),
                       .intensity = -1,
                       .backoff = &bo};
    ASSERT_EQ(weft_sup_spawn(NULL, &o, specs, N, &cx->sup), 0);
    int st;
    ASSERT_EQ(weft_sup_join_until(cx->sup, &st, WEFT_NEVER), 0);
    ASSERT_EQ(st, 0);
    weft_sup_stats ss;
    ASSERT_EQ(weft_sup_stats_get(cx->sup, &ss), 0);
    ASSERT(ss.restarts > 0);
    ASSERT_EQ(weft_sup_free(cx->sup), 0);
    return 0;
}

TEST(random_crashes_two_workers)
{
    for (uint64_t seed = 1; seed <= 3; seed++) {
        crash_ctx cx = {.target = T_SCALE(1000) + (long)seed - 1};
        ASSERT_EQ(t_run(2, WEFT_CLOCK_VIRTUAL, T_SEED(seed), crash_root, &cx),
                  0);
        ASSERT(cx.crashes >= cx.target);
    }
}

/* ---- many restarts, one child, fail at once: no allocation grows ---- */

static _Atomic long quick_starts;
static long quick_target;

static int quick_fail(void *arg)
{
    weft_sup **s = arg;
    if (atomic_fetch_add(&quick_starts, 1) + 1 == quick_target)
        weft_sup_stop(*s);
    return -EIO;
}

static int quick_root(void *arg)
{
    WEFT_UNUSED_T(arg);
    static weft_sup *s;
    weft_child_spec c = {.name = "q", .start = quick_fail, .arg = &s};
    weft_sup_opts o = {.intensity = -1};
    ASSERT_EQ(weft_sup_spawn(NULL, &o, &c, 1, &s), 0);
    ASSERT_EQ(weft_sup_join_until(s, NULL, WEFT_NEVER), 0);
    weft_sup_stats ss;
    ASSERT_EQ(weft_sup_stats_get(s, &ss), 0);
    ASSERT(ss.restarts >= quick_target - 1);
    ASSERT_EQ(weft_sup_free(s), 0);
    return 0;
}

TEST(many_restarts)
{
    quick_target = T_SCALE(100000);
    quick_starts = 0;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    ASSERT_EQ(t_run_mono(1, quick_root, NULL), 0);
    clock_gettime(CLOCK_MONOTONIC, &b);
    ASSERT(quick_starts >= quick_target);
    double ns = ((double)(b.tv_sec - a.tv_sec) * 1e9 +
                 (double)(b.tv_nsec - a.tv_nsec)) /
                (double)quick_target;
    fprintf(stderr, "%ld restarts: %.0f ns each\n", quick_target, ns);
}

/* ---- actor children ---- */

/* A registered counter actor under a one_for_one supervisor: "crash"
 * makes it fail; the supervisor starts a new one under the same name,
 * with its count from zero. At shutdown it is stopped with
 * WEFT_STOP_DRAIN: tells queued before the stop are still handled. */
enum { A_INC, A_GET, A_CRASH, A_SLOW };

static atomic_long actor_handled; /* increments seen, over every life */
static atomic_int actor_starts, actor_stops;

static int counter_start(void *state)
{
    *(long *)state = 0;
    atomic_fetch_add(&actor_starts, 1);
    return 0;
}

static void counter_stop(void *state, int status)
{
    WEFT_UNUSED_T(state);
    WEFT_UNUSED_T(status);
    atomic_fetch_add(&actor_stops, 1);
}

static int counter_fn(void *state, weft_actor_msg *m)
{
    long *n = state;
    switch (*(int *)m->data) {
    case A_INC:
        (*n)++;
        atomic_fetch_add(&actor_handled, 1);
        return 0;
    case A_GET:
        return weft_actor_reply(m, n);
    case A_SLOW: /* holds the actor 10 ms, so tells queue up behind it */
        return weft_sleep_for(10 * MS);
    default:
        return -EIO;
    }
}

static long counter_state; /* the actor's (one life at a time) */

static const weft_actor_opts counter_opts = {.fn = counter_fn,
                                             .state = &counter_state,
                                             .msg_size = sizeof(int),
                                             .reply_size = sizeof(long),
                                             .capacity = 8,
                                             .register_as = "counter",
                                             .on_start = counter_start,
                                             .on_stop = counter_stop};

/* Asks the registered counter for its count (waiting for a restart to
 * register it again). */
static long ask_count(void)
{
    for (;;) {
        weft_actor *a = weft_whereis("counter");
        if (a) {
            long v = -1;
            int get = A_GET;
            int rc = weft_actor_ask(a, &get, &v, WEFT_NEVER);
            weft_actor_unref(a);
            if (rc == 0)
                return v;
        }
        if (weft_sleep_for(MS) != 0)
            return -1;
    }
}

static int actor_child_root(void *arg)
{
    WEFT_UNUSED_T(arg);
    weft_child_spec spec = {.name = "counter",
                            .actor = &counter_opts,
                            .restart = WEFT_PERMANENT,
                            .shutdown_ns = WEFT_SEC};
    weft_sup_opts o = {
        .strategy = WEFT_ONE_FOR_ONE, .intensity = 5, .period_ns = WEFT_SEC};
    weft_sup *s;
    ASSERT_EQ(weft_sup_spawn(NULL, &o, &spec, 1, &s), 0);
    int inc = A_INC, crash = A_CRASH, slow = A_SLOW;
    for (int i = 0; i < 3; i++) {
        weft_actor *a = NULL;
        while (!(a = weft_whereis("counter")))
            ASSERT_EQ(weft_sleep_for(MS), 0);
        ASSERT_EQ(weft_actor_tell(a, &inc, WEFT_NEVER), 0);
        ASSERT_EQ(weft_actor_tell(a, &inc, WEFT_NEVER), 0);
        ASSERT_EQ(ask_count(), 2); /* a fresh life each round */
        ASSERT_EQ(weft_actor_tell(a, &crash, WEFT_NEVER), 0);
        int st = 0;
        ASSERT_EQ(weft_actor_join_until(a, &st, WEFT_NEVER), 0);
        ASSERT_EQ(st, -EIO);
        /* The old reference is safe, and refuses. */
        ASSERT_EQ(weft_actor_tell(a, &inc, WEFT_NEVER), -ESRCH);
        weft_actor_unref(a);
    }
    ASSERT_EQ(ask_count(), 0); /* restarted a third time */
    weft_sup_stats ss = {0};
    ASSERT_EQ(weft_sup_stats_get(s, &ss), 0);
    ASSERT_EQ(ss.running, 1);
    ASSERT_EQ(ss.restarts, 3);
    /* Shutdown drains: five tells queued behind a slow message are all
     * handled before the actor exits. */
    weft_actor *a = weft_whereis("counter");
    ASSERT(a != NULL);
    ASSERT_EQ(weft_actor_tell(a, &slow, WEFT_NEVER), 0);
    for (int i = 0; i < 5; i++)
        ASSERT_EQ(weft_actor_tell(a, &inc, WEFT_NEVER), 0);
    long before = atomic_load(&actor_handled);
    ASSERT_EQ(weft_sup_stop(s), 0);
    int st = -1;
    ASSERT_EQ(weft_sup_join_until(s, &st, WEFT_NEVER), 0);
    ASSERT_EQ(st, 0);
    ASSERT_EQ(atomic_load(&actor_handled), before + 5);
    int ast = -1;
    ASSERT_EQ(weft_actor_join_until(a, &ast, WEFT_NEVER), 0);
    ASSERT_EQ(ast, 0); /* drained: a normal exit */
    weft_actor_unref(a);
    ASSERT(weft_whereis("counter") == NULL); /* the name went with it */
    ASSERT_EQ(weft_sup_free(s), 0);
    return 0;
}

TEST(actor_children_restart_and_drain)
{
    atomic_store(&actor_handled, 0);
    atomic_store(&actor_starts, 0);
    atomic_store(&actor_stops, 0);
    ASSERT_EQ(t_run_virtual(2, actor_child_root, NULL), 0);
    ASSERT_EQ(atomic_load(&actor_starts), 4);
    ASSERT_EQ(atomic_load(&actor_stops), 4);
}

static int bad_actor_root(void *arg)
{
    WEFT_UNUSED_T(arg);
    weft_actor_opts bad = counter_opts;
    bad.capacity = 0;
    weft_child_spec spec = {.name = "bad", .actor = &bad};
    weft_sup_opts o = {.strategy = WEFT_ONE_FOR_ONE};
    ASSERT_EQ(weft_sup_run(&o, &spec, 1), -EINVAL);
    weft_child_spec both = {
        .name = "both", .actor = &counter_opts, .start = kid_fn};
    ASSERT_EQ(weft_sup_run(&o, &both, 1), -EINVAL);
    return 0;
}

TEST(actor_child_spec_errors)
{
    ASSERT_EQ(t_run_virtual(1, bad_actor_root, NULL), 0);
}
