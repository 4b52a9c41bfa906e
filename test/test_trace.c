/* SPDX-License-Identifier: MIT */
/*
 * Instrument hooks and the trace exporter: the hooks fire in order for a
 * known scene (one worker, a seed, the virtual clock), their counts agree
 * on two workers, nothing is called without an instrument, and the trace
 * file is JSON of the right shape (checked by python3: a track named per
 * worker, slices with a name, ts and dur >= 0, not overlapping on a track,
 * one per run).
 */
#include "t.h"
#include "weft.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- a recording instrument ---- */

enum { E_SPAWN, E_RUN, E_PARK, E_WAKE, E_EXIT, E_CANCEL };

typedef struct event {
    int type;
    uint64_t id;    /* the task (cancel: 0) */
    uint64_t other; /* spawn: parent; wake: waker; cancel: by (0: none) */
    int arg;        /* park: kind; wake: code; exit: status; cancel: reason */
    int worker;     /* the task's worker (spawn: -1 until it runs) */
    char name[32];  /* spawn: its name */
} event;

#define LOG_MAX 4096

/* One worker: the log is written by one thread. Two: counts only. */
static struct {
    event log[LOG_MAX];
    int n;
    atomic_long count[6];
    atomic_long yields;
    bool logging;
} rec;

static void note(int type, const weft_task_info *t, uint64_t other, int arg)
{
    atomic_fetch_add(&rec.count[type], 1);
    if (!rec.logging)
        return;
    ASSERT(rec.n < LOG_MAX);
    event *e = &rec.log[rec.n++];
    *e = (event){.type = type,
                 .id = t ? t->id : 0,
                 .other = other,
                 .arg = arg,
                 .worker = t ? t->worker : -1};
    if (type == E_SPAWN && t->name)
        snprintf(e->name, sizeof e->name, "%s", t->name);
}

static void i_spawn(void *ctx, const weft_task_info *t,
                    const weft_task_info *parent)
{
    ASSERT(ctx == &rec);
    ASSERT(t->id != 0);
    ASSERT(t->file != NULL && t->line > 0);
    ASSERT_EQ(t->worker, -1); /* not started yet */
    note(E_SPAWN, t, parent ? parent->id : 0, 0);
}

static void i_run(void *ctx, const weft_task_info *t)
{
    (void)ctx;
    ASSERT_EQ(t->worker, weft_worker_id()); /* on its own worker */
    note(E_RUN, t, 0, 0);
}

static void i_park(void *ctx, const weft_task_info *t, weft_wait_kind kind,
                   const void *obj)
{
    (void)ctx;
    (void)obj;
    ASSERT_EQ(t->worker, weft_worker_id());
    if (kind == WEFT_WAIT_YIELD)
        atomic_fetch_add(&rec.yields, 1);
    note(E_PARK, t, 0, (int)kind);
}

static void i_wake(void *ctx, const weft_task_info *t,
                   const weft_task_info *waker, int code)
{
    (void)ctx;
    note(E_WAKE, t, waker ? waker->id : 0, code);
}

static void i_exit(void *ctx, const weft_task_info *t, int status)
{
    (void)ctx;
    ASSERT_EQ(t->worker, weft_worker_id());
    note(E_EXIT, t, 0, status);
}

static void i_cancel(void *ctx, weft_scope *s, weft_cancel_reason reason,
                     const weft_task_info *by)
{
    (void)ctx;
    ASSERT(s != NULL);
    note(E_CANCEL, NULL, by ? by->id : 0, (int)reason);
}

static const weft_instrument recorder = {.ctx = &rec,
                                         .spawn = i_spawn,
                                         .run = i_run,
                                         .park = i_park,
                                         .wake = i_wake,
                                         .exit = i_exit,
                                         .scope_cancel = i_cancel};

static void rec_reset(bool logging)
{
    memset(&rec, 0, sizeof rec);
    rec.logging = logging;
}

static long count(int type)
{
    return atomic_load(&rec.count[type]);
}

/* The id of the task spawned with this name (0: none). */
static uint64_t id_of(const char *name)
{
    for (int i = 0; i < rec.n; i++)
        if (rec.log[i].type == E_SPAWN && strcmp(rec.log[i].name, name) == 0)
            return rec.log[i].id;
    return 0;
}

/* The events of task id, in order, as a string of letters (s spawn, r
 * run, p park, w wake, x exit), each event's copy in out[]. */
static void story(uint64_t id, char *letters, event *out, int max)
{
    int k = 0;
    for (int i = 0; i < rec.n && k < max - 1; i++) {
        if (rec.log[i].id != id || rec.log[i].type == E_CANCEL)
            continue;
        letters[k] = "srpwx"[rec.log[i].type];
        out[k++] = rec.log[i];
    }
    letters[k] = 0;
}

/* Position in the log of the first event of this type and task. */
static int first(int type, uint64_t id)
{
    for (int i = 0; i < rec.n; i++)
        if (rec.log[i].type == type &&
            (type == E_CANCEL || rec.log[i].id == id))
            return i;
    return -1;
}

/* ---- the scene ---- */

static int receiver(void *arg)
{
    int v = 0;
    ASSERT_EQ(weft_chan_recv(arg, &v), 0);
    return v; /* 7 */
}

static int sleeper(void *arg)
{
    (void)arg;
    return weft_sleep_for(WEFT_SEC); /* cancelled: -ECANCELED */
}

static int scene(void *arg)
{
    (void)arg;
    weft_chan *c = NULL;
    ASSERT_EQ(weft_chan_new(&c, sizeof(int), 0), 0);
    weft_scope *s = NULL;
    ASSERT_EQ(weft_scope_open(&s, &(weft_scope_opts){.policy = WEFT_COLLECT}),
              0);
    ASSERT(weft_spawn_ex(s, receiver, c, &(weft_spawn_opts){.name = "rx"}) >=
           0);
    ASSERT(weft_spawn_ex(s, sleeper, NULL, &(weft_spawn_opts){.name = "sl"}) >=
           0);
    ASSERT_EQ(weft_sleep_for(WEFT_MSEC), 0); /* both are parked now */
    int v = 7;
    ASSERT_EQ(weft_chan_send(c, &v), 0);
    ASSERT_EQ(weft_sleep_for(WEFT_MSEC), 0); /* rx has exited */
    ASSERT_EQ(weft_scope_cancel(s), 0);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);
    weft_chan_unref(c);
    return 0;
}

static int failing(void *arg)
{
    (void)arg;
    return -EIO;
}

/* A fail-fast scope whose child fails: the policy cancels it. */
static int scene_fail(void *arg)
{
    (void)arg;
    weft_scope *s = scope_open();
    ASSERT(weft_spawn_ex(s, sleeper, NULL, &(weft_spawn_opts){.name = "sl"}) >=
           0);
    ASSERT(weft_spawn_ex(s, failing, NULL, &(weft_spawn_opts){.name = "bad"}) >=
           0);
    ASSERT_EQ(weft_scope_join(s), -EIO);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

static void run_scene(uint64_t seed)
{
    weft_config cfg = {.workers = 1,
                       .clock = WEFT_CLOCK_VIRTUAL,
                       .seed = seed,
                       .instrument = &recorder};
    ASSERT_EQ(weft_run(&cfg, scene, NULL), 0);
}

TEST(hooks_order)
{
    rec_reset(true);
    run_scene(T_SEED(0x5eed));
    /* The root is spawned first, by nobody, with id 1. */
    ASSERT(rec.n > 0);
    ASSERT_EQ(rec.log[0].type, E_SPAWN);
    ASSERT_EQ(rec.log[0].id, 1);
    ASSERT_EQ(rec.log[0].other, 0);
    uint64_t root = 1, rx = id_of("rx"), sl = id_of("sl");
    ASSERT(rx != 0 && sl != 0 && rx != sl && rx != root);
    /* Spawned by worker 0: its index + 1 in the top bits. */
    ASSERT_EQ(rx >> 40, 1);
    ASSERT_EQ(sl >> 40, 1);

    char l[64];
    event e[64];
    /* rx: spawned by the root, runs, parks on the receive, woken by the
     * root's send, runs, exits with 7. */
    story(rx, l, e, 64);
    ASSERT(strcmp(l, "srpwrx") == 0);
    ASSERT_EQ(e[0].other, root);
    ASSERT_EQ(e[1].worker, 0);
    ASSERT_EQ(e[2].arg, WEFT_WAIT_RECV);
    ASSERT_EQ(e[3].other, root);
    ASSERT_EQ(e[3].arg, 0);
    ASSERT_EQ(e[5].arg, 7);
    /* sl: parks in its sleep; the root's cancel of the scope (reported
     * once, reason user, by the root, after the wakes) wakes it with
     * -ECANCELED. */
    story(sl, l, e, 64);
    ASSERT(strcmp(l, "srpwrx") == 0);
    ASSERT_EQ(e[2].arg, WEFT_WAIT_SLEEP);
    ASSERT_EQ(e[3].other, root);
    ASSERT_EQ(e[3].arg, -ECANCELED);
    ASSERT_EQ(e[5].arg, -ECANCELED);
    ASSERT_EQ(count(E_CANCEL), 1);
    int c = first(E_CANCEL, 0);
    ASSERT_EQ(rec.log[c].arg, WEFT_CANCEL_USER);
    ASSERT_EQ(rec.log[c].other, root);
    ASSERT(first(E_WAKE, sl) < c); /* reported after the wakes it made */
    ASSERT(first(E_EXIT, rx) < c);
    /* The root: sleeps (a timer wakes it: no waker), joins, exits 0. */
    story(root, l, e, 64);
    ASSERT(strcmp(l, "srpwrpwrpwrx") == 0);
    ASSERT_EQ(e[2].arg, WEFT_WAIT_SLEEP);
    ASSERT_EQ(e[3].other, 0);
    ASSERT_EQ(e[3].arg, -ETIMEDOUT);
    ASSERT_EQ(e[8].arg, WEFT_WAIT_SCOPE);
    ASSERT_EQ(e[11].arg, 0);
    ASSERT_EQ(count(E_SPAWN), 3);
    ASSERT_EQ(count(E_EXIT), 3);

    /* The same seed, the same log. */
    static event first_log[LOG_MAX];
    int n = rec.n;
    memcpy(first_log, rec.log, sizeof first_log);
    rec_reset(true);
    run_scene(0x5eed);
    ASSERT_EQ(rec.n, n);
    for (int i = 0; i < n; i++) {
        ASSERT_EQ(first_log[i].type, rec.log[i].type);
        ASSERT_EQ(first_log[i].id, rec.log[i].id);
        ASSERT_EQ(first_log[i].other, rec.log[i].other);
        ASSERT_EQ(first_log[i].arg, rec.log[i].arg);
    }
}

TEST(hooks_policy_cancel)
{
    rec_reset(true);
    weft_config cfg = {
        .workers = 1, .clock = WEFT_CLOCK_VIRTUAL, .instrument = &recorder};
    ASSERT_EQ(weft_run(&cfg, scene_fail, NULL), 0);
    /* the failing child's exit cancels its fail-fast scope: reported once,
     * reason policy, by the child */
    ASSERT_EQ(count(E_CANCEL), 1);
    int c = first(E_CANCEL, 0);
    ASSERT_EQ(rec.log[c].arg, WEFT_CANCEL_POLICY);
    ASSERT_EQ(rec.log[c].other, id_of("bad"));
}

/* ---- counts on two workers ---- */

typedef struct pair {
    weft_chan *ping, *pong;
    int rounds;
} pair;

static int echo(void *arg)
{
    pair *p = arg;
    int v;
    while (weft_chan_recv(p->ping, &v) == 0)
        if (weft_chan_send(p->pong, &v) != 0)
            break;
    return 0;
}

static int pinger(void *arg)
{
    pair *p = arg;
    for (int i = 0; i < p->rounds; i++) {
        int v = i;
        ASSERT_EQ(weft_chan_send(p->ping, &v), 0);
        ASSERT_EQ(weft_chan_recv(p->pong, &v), 0);
        ASSERT_EQ(v, i);
        if (i % 8 == 0)
            ASSERT_EQ(weft_sleep_for(WEFT_USEC), 0);
    }
    weft_chan_close(p->ping);
    return 0;
}

#define NPAIRS 8

/* NPAIRS pairs talking over channels, some pinned to worker 2 so that
 * wakes cross workers. */
static int busy(void *arg)
{
    (void)arg;
    static pair ps[NPAIRS];
    weft_scope *s = scope_open();
    for (int i = 0; i < NPAIRS; i++) {
        pair *p = &ps[i];
        p->rounds = (int)T_SCALE(20);
        ASSERT_EQ(weft_chan_new(&p->ping, sizeof(int), 0), 0);
        ASSERT_EQ(weft_chan_new(&p->pong, sizeof(int), 1), 0);
        ASSERT(weft_spawn_ex(s, echo, p,
                             &(weft_spawn_opts){.worker = i % 2 + 1}) >= 0);
        ASSERT(weft_spawn_ex(s, pinger, p,
                             &(weft_spawn_opts){.name = "ping"}) >= 0);
    }
    scope_end(s);
    for (int i = 0; i < NPAIRS; i++) {
        weft_chan_unref(ps[i].ping);
        weft_chan_unref(ps[i].pong);
    }
    return 0;
}

static void check_counts(void)
{
    long tasks = 1 + 2 * NPAIRS;
    ASSERT_EQ(count(E_SPAWN), tasks);
    ASSERT_EQ(count(E_EXIT), tasks);
    /* every run ends in a park or the exit; every park but a yield ends
     * in a wake */
    ASSERT_EQ(count(E_RUN), count(E_PARK) + count(E_EXIT));
    ASSERT_EQ(count(E_WAKE), count(E_PARK) - atomic_load(&rec.yields));
    ASSERT(count(E_PARK) >= NPAIRS * T_SCALE(20));
}

TEST(hooks_counts_two_workers)
{
    rec_reset(false);
    weft_config cfg = {
        .workers = 2, .clock = WEFT_CLOCK_VIRTUAL, .instrument = &recorder};
    ASSERT_EQ(weft_run(&cfg, busy, NULL), 0);
    check_counts();
    /* and on the real clock */
    rec_reset(false);
    cfg.clock = WEFT_CLOCK_MONOTONIC;
    ASSERT_EQ(weft_run(&cfg, busy, NULL), 0);
    check_counts();
}

TEST(hooks_none)
{
    /* A run without an instrument calls nothing, even right after one
     * with; one whose callbacks are all NULL runs as well. */
    rec_reset(false);
    ASSERT_EQ(t_run_virtual(2, busy, NULL), 0);
    ASSERT_EQ(t_run_virtual(1, scene, NULL), 0);
    for (int i = 0; i < 6; i++)
        ASSERT_EQ(count(i), 0);
    static const weft_instrument empty = {0};
    weft_config cfg = {.workers = 2, .instrument = &empty};
    ASSERT_EQ(weft_run(&cfg, busy, NULL), 0);
    ASSERT_EQ(weft_run(&(weft_config){.workers = 1}, scene, NULL), 0);
    for (int i = 0; i < 6; i++)
        ASSERT_EQ(count(i), 0);
}

TEST(wait_kind_names)
{
    ASSERT(strcmp(weft_wait_kind_name(WEFT_WAIT_RECV), "channel receive") == 0);
    ASSERT(strcmp(weft_wait_kind_name(WEFT_WAIT_SLEEP), "sleep") == 0);
    ASSERT(strcmp(weft_wait_kind_name(WEFT_WAIT_YIELD), "yield") == 0);
    ASSERT(strcmp(weft_wait_kind_name(-1), "?") == 0);
    ASSERT(strcmp(weft_wait_kind_name(WEFT_WAIT_YIELD + 1), "?") == 0);
}

/* ---- the trace file ---- */

/* Checks a trace file: argv: path, workers, expected slices (-1: any).
 * Prints what is wrong on stderr and exits 1; 0 if all is well. */
static const char checker[] =
    "import json, sys\n"
    "path, workers, want = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])\n"
    "d = json.load(open(path))\n"
    "bad = []\n"
    "ev = d['traceEvents']\n"
    "names = {e['tid']: e['args']['name'] for e in ev\n"
    "         if e['ph'] == 'M' and e['name'] == 'thread_name'}\n"
    "if sorted(names) != list(range(1, workers + 1)):\n"
    "    bad.append('thread names: %r' % names)\n"
    "if not any(e['ph'] == 'M' and e['name'] == 'process_name' for e in ev):\n"
    "    bad.append('no process_name')\n"
    "sl = [e for e in ev if e['ph'] == 'X']\n"
    "for e in sl:\n"
    "    if not e.get('name') or e['ts'] < 0 or e['dur'] < 0:\n"
    "        bad.append('slice %r' % e)\n"
    "    if e['tid'] not in names or e['pid'] != 1:\n"
    "        bad.append('slice off the tracks %r' % e)\n"
    "    a = e['args']\n"
    "    if not isinstance(a['id'], int) or 'then' not in a:\n"
    "        bad.append('slice args %r' % e)\n"
    "for tid in names:\n"
    "    mine = sorted((round(e['ts'] * 1000), round(e['dur'] * 1000))\n"
    "                  for e in sl if e['tid'] == tid)\n"
    "    for (t0, d0), (t1, d1) in zip(mine, mine[1:]):\n"
    "        if t1 < t0 + d0:\n"
    "            bad.append('overlap on %d at %d' % (tid, t1))\n"
    "for e in ev:\n"
    "    if e['ph'] == 'i' and (e['ts'] < 0 or e['tid'] not in names):\n"
    "        bad.append('instant %r' % e)\n"
    "if want >= 0 and len(sl) != want:\n"
    "    bad.append('%d slices, %d runs' % (len(sl), want))\n"
    "if d['otherData']['dropped'] != 0:\n"
    "    bad.append('dropped %r' % d['otherData'])\n"
    "for b in bad[:10]:\n"
    "    print('trace check:', b, file=sys.stderr)\n"
    "sys.exit(1 if bad else 0)\n";

static int check_trace(const char *path, int workers, long slices)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "python3 - '%s' %d %ld", path, workers, slices);
    FILE *p = popen(cmd, "w");
    ASSERT(p != NULL);
    fputs(checker, p);
    int st = pclose(p);
    return st;
}

/* A file of the test's own, in the working directory. */
static void trace_file(char *buf, size_t size)
{
    snprintf(buf, size, "test_trace_%s_%d.json", t_current, (int)getpid());
}

/* Python's answer for an expression about the trace (its last line). */
static long py_eval(const char *path, const char *expr)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "python3 -c \"import json; d = json.load(open('%s')); "
             "ev = d['traceEvents']; print(int(%s))\"",
             path, expr);
    FILE *p = popen(cmd, "r");
    ASSERT(p != NULL);
    long v = -1;
    ASSERT_EQ(fscanf(p, "%ld", &v), 1);
    ASSERT_EQ(pclose(p), 0);
    return v;
}

TEST(trace_file_shape)
{
    char path[128];
    trace_file(path, sizeof path);
    /* With an instrument too: the tracer passes every event on, so the
     * runs it saw are counted there. */
    rec_reset(false);
    weft_config cfg = {.workers = 2,
                       .clock = WEFT_CLOCK_MONOTONIC,
                       .instrument = &recorder,
                       .trace_path = path};
    ASSERT_EQ(weft_run(&cfg, busy, NULL), 0);
    check_counts();
    ASSERT_EQ(check_trace(path, 2, count(E_RUN)), 0);
    /* named tasks keep their names; the unnamed are "task W.N" */
    ASSERT_EQ(py_eval(path, "sum(e['ph'] == 'X' and e['name'] == 'root' "
                            "for e in ev) >= 1"),
              1);
    ASSERT_EQ(py_eval(path, "all(e['name'] == 'ping' for e in ev if "
                            "e['ph'] == 'X' and e['args'].get('then') == "
                            "'exit' and e['name'] != 'root' and not "
                            "e['name'].startswith('task '))"),
              1);
    ASSERT_EQ(py_eval(path, "sum(e['ph'] == 'X' and e['args']['then'] == "
                            "'exit' for e in ev)"),
              1 + 2 * NPAIRS);
    ASSERT_EQ(py_eval(path, "sum(e['ph'] == 'i' and e['cat'] == 'wake' "
                            "for e in ev) > 0"),
              1);
    ASSERT_EQ(unlink(path), 0);
}

TEST(trace_virtual_scene)
{
    char path[128];
    trace_file(path, sizeof path);
    rec_reset(true);
    weft_config cfg = {.workers = 1,
                       .clock = WEFT_CLOCK_VIRTUAL,
                       .seed = 3,
                       .instrument = &recorder,
                       .trace_path = path};
    ASSERT_EQ(weft_run(&cfg, scene, NULL), 0);
    ASSERT_EQ(check_trace(path, 1, count(E_RUN)), 0);
    /* virtual time: the root's last slice starts at 2 ms (two sleeps of
     * 1 ms), and a task's run takes no time */
    ASSERT_EQ(py_eval(path, "max(e['ts'] for e in ev if e['ph'] == 'X') "
                            "== 2000"),
              1);
    ASSERT_EQ(py_eval(path, "all(e['dur'] == 0 for e in ev if e['ph'] == 'X')"),
              1);
    ASSERT_EQ(py_eval(path, "d['otherData']['clock'] == 'virtual'"), 1);
    /* the scope cancel, as an instant */
    ASSERT_EQ(py_eval(path, "sum(e['name'] == 'scope cancel' for e in ev)"), 1);
    ASSERT_EQ(py_eval(path, "sum(e['ph'] == 'X' and e['name'] == 'rx' and "
                            "e['args']['then'] == 'channel receive' for e "
                            "in ev)"),
              1);
    ASSERT_EQ(unlink(path), 0);
}

static atomic_int ran;

static int mark_ran(void *arg)
{
    (void)arg;
    atomic_store(&ran, 1);
    return 0;
}

TEST(trace_env_and_errors)
{
    char path[128], other[160];
    trace_file(path, sizeof path);
    snprintf(other, sizeof other, "env_%s", path);
    /* WEFT_TRACE wins over the field */
    ASSERT_EQ(setenv("WEFT_TRACE", other, 1), 0);
    weft_config cfg = {.workers = 1, .trace_path = path};
    ASSERT_EQ(weft_run(&cfg, mark_ran, NULL), 0);
    ASSERT_EQ(access(path, F_OK), -1);
    ASSERT_EQ(check_trace(other, 1, 1), 0);
    ASSERT_EQ(unlink(other), 0);
    /* set but empty: no trace at all */
    ASSERT_EQ(setenv("WEFT_TRACE", "", 1), 0);
    ASSERT_EQ(weft_run(&cfg, mark_ran, NULL), 0);
    ASSERT_EQ(access(path, F_OK), -1);
    ASSERT_EQ(unsetenv("WEFT_TRACE"), 0);
    /* a file that cannot be made: the error, and nothing runs */
    atomic_store(&ran, 0);
    cfg.trace_path = "no-such-directory/trace.json";
    ASSERT_EQ(weft_run(&cfg, mark_ran, NULL), -ENOENT);
    ASSERT_EQ(atomic_load(&ran), 0);
    /* the field alone */
    cfg.trace_path = path;
    ASSERT_EQ(weft_run(&cfg, mark_ran, NULL), 0);
    ASSERT_EQ(atomic_load(&ran), 1);
    ASSERT_EQ(check_trace(path, 1, 1), 0);
    ASSERT_EQ(unlink(path), 0);
}
