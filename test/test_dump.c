/* SPDX-License-Identifier: MIT */
/*
 * The task dump (weft_dump): text and JSON lines, what each kind of wait
 * shows, a dump from a thread outside the runtime while tasks come and go
 * on 2 workers, 100,000 parked tasks in bounded memory, SIGQUIT under
 * weft_main, and the errors.
 */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "observe/observe.h" /* weft__dump_buf_size */
#include "observe/where.h"
#include "sched/scheduler.h" /* weft__stacks_released */
#include "scope/struct.h"
#include "t.h"

/* ---- a small JSON checker: one value, nothing after it ---- */

static const char *js_value(const char *p, int depth);

static const char *js_ws(const char *p)
{
    while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')
        p++;
    return p;
}

static const char *js_string(const char *p)
{
    if (*p++ != '"')
        return NULL;
    for (; *p != '"'; p++) {
        if ((unsigned char)*p < 0x20)
            return NULL;
        if (*p == '\\') {
            p++;
            if (*p == 'u') {
                for (int i = 1; i <= 4; i++)
                    if (!strchr("0123456789abcdefABCDEF", p[i]) || !p[i])
                        return NULL;
                p += 4;
            } else if (!*p || !strchr("\"\\/bfnrt", *p)) {
                return NULL;
            }
        }
    }
    return p + 1;
}

static const char *js_number(const char *p)
{
    const char *s = p;
    if (*p == '-')
        p++;
    if (*p < '0' || *p > '9')
        return NULL;
    while (*p >= '0' && *p <= '9')
        p++;
    if (*p == '.') {
        p++;
        if (*p < '0' || *p > '9')
            return NULL;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    return p > s ? p : NULL;
}

static const char *js_list(const char *p, char close, int depth, int object)
{
    p = js_ws(p + 1);
    if (*p == close)
        return p + 1;
    for (;;) {
        if (object) {
            if (!(p = js_string(p)))
                return NULL;
            p = js_ws(p);
            if (*p++ != ':')
                return NULL;
        }
        if (!(p = js_value(js_ws(p), depth + 1)))
            return NULL;
        p = js_ws(p);
        if (*p == close)
            return p + 1;
        if (*p++ != ',')
            return NULL;
        p = js_ws(p);
    }
}

static const char *js_value(const char *p, int depth)
{
    if (depth > 32)
        return NULL;
    switch (*p) {
    case '{':
        return js_list(p, '}', depth, 1);
    case '[':
        return js_list(p, ']', depth, 0);
    case '"':
        return js_string(p);
    case 't':
        return strncmp(p, "true", 4) ? NULL : p + 4;
    case 'f':
        return strncmp(p, "false", 5) ? NULL : p + 5;
    case 'n':
        return strncmp(p, "null", 4) ? NULL : p + 4;
    }
    return js_number(p);
}

/* 1 if line (no newline) is one JSON object. */
static int json_object(const char *line)
{
    const char *p = js_ws(line);
    if (*p != '{')
        return 0;
    p = js_value(p, 0);
    return p && *js_ws(p) == '\0';
}

/* ---- dumps into memory ---- */

/* A temporary file's descriptor. */
static int temp_fd(void)
{
    char path[] = "/tmp/weft_dump_XXXXXX";
    int fd = mkstemp(path);
    ASSERT(fd >= 0);
    unlink(path);
    return fd;
}

/* The whole of fd's file, NUL-terminated; free it. */
static char *slurp(int fd)
{
    off_t size = lseek(fd, 0, SEEK_END);
    ASSERT(size >= 0);
    char *s = malloc((size_t)size + 1);
    ASSERT(s);
    ASSERT_EQ(pread(fd, s, (size_t)size, 0), size);
    s[size] = 0;
    return s;
}

static char *dump_string(unsigned flags)
{
    int fd = temp_fd();
    if (getenv("T_SHOW_STACKS")) /* the same, with every stack */
        flags |= WEFT_DUMP_STACKS;
    ASSERT_EQ(weft_dump(fd, flags), 0);
    char *s = slurp(fd);
    close(fd);
    if (getenv("T_SHOW_DUMP")) /* to see one while debugging a test */
        fputs(s, stderr);
    return s;
}

/* The line of text that contains needle, copied into out (or "" if none). */
static const char *line_with(const char *text, const char *needle, char *out,
                             size_t cap)
{
    out[0] = 0;
    const char *hit = strstr(text, needle);
    if (!hit)
        return out;
    const char *b = hit;
    while (b > text && b[-1] != '\n')
        b--;
    const char *e = strchr(hit, '\n');
    size_t n = e ? (size_t)(e - b) : strlen(b);
    if (n >= cap)
        n = cap - 1;
    memcpy(out, b, n);
    out[n] = 0;
    return out;
}

static bool starts(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* How many lines of s contain needle (a line at a time: ASan's strstr
 * measures the whole haystack at each call), but those of a dump's slow-slice
 * section (from "slow slices (" to the end line, or JSON's "slices"
 * line): a task with a long slice is named there too, and whether one
 * is depends on how the machine ran. */
static long count_matching(const char *s, const char *needle)
{
    long n = 0;
    bool slices = false;
    char line[8192];
    while (*s) {
        const char *e = strchr(s, '\n');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        size_t k = len < sizeof(line) - 1 ? len : sizeof(line) - 1;
        memcpy(line, s, k);
        line[k] = 0;
        if (starts(line, "slow slices ("))
            slices = true;
        else if (starts(line, "end of dump: "))
            slices = false;
        if (!slices && !starts(line, "{\"type\":\"slices\""))
            n += strstr(line, needle) != NULL;
        s += len + (e != NULL);
    }
    return n;
}

static long count_lines(const char *s)
{
    long n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* Lines of the slow-slice section before a dump's end (text: from
 * "slow slices (" to the end line; JSON: the "slices" line). How many
 * depends on how long tasks ran, so the exact counts leave them out. */
static long slice_lines(const char *s)
{
    const char *p = strstr(s, "{\"type\":\"slices\"");
    if (p)
        return 1;
    p = strstr(s, "\nslow slices (");
    const char *e = p ? strstr(p, "\nend of dump: ") : NULL;
    long n = 0;
    for (; p && p < e; p++)
        n += *p == '\n';
    return n;
}

/* Lines of a text dump but those under a task that say where it waits
 * ("at ..." and its frames). */
static long count_lines_but_where(const char *s)
{
    long n = 0;
    while (*s) {
        const char *p = s;
        while (*p == ' ')
            p++;
        n += strncmp(p, "at ", 3) != 0 && *p != '#';
        const char *e = strchr(s, '\n');
        s = e ? e + 1 : s + strlen(s);
    }
    return n;
}

/* ---- one task parked on each kind of thing ---- */

struct zoo {
    weft_chan *chan;
    weft_mutex mu;
    weft_event go;
    weft_event held;  /* the holder holds mu */
    weft_event bdone; /* the blocking call has returned */
    int pfd[2];       /* the reader's descriptor */
    int bfd[2];       /* what the blocking call reads */
    weft_future *fut;
    weft_scope *s;
};

static int receiver(void *arg)
{
    struct zoo *z = arg;
    int v;
    return weft_chan_recv(z->chan, &v) == -ECANCELED ? 0 : -EPROTO;
}

static int holder(void *arg)
{
    struct zoo *z = arg;
    ASSERT_EQ(weft_mutex_lock(&z->mu), 0);
    weft_event_set(&z->held);
    weft_event_wait(&z->go); /* cancelled at the end */
    ASSERT_EQ(weft_mutex_unlock(&z->mu), 0);
    return 0;
}

static int taker(void *arg)
{
    struct zoo *z = arg;
    if (weft_event_wait(&z->held) == 0 && weft_mutex_lock(&z->mu) == 0)
        weft_mutex_unlock(&z->mu);
    return 0;
}

static int sleeper(void *arg)
{
    (void)arg;
    weft_sleep_for(10 * WEFT_SEC);
    return 0;
}

static int reader(void *arg)
{
    struct zoo *z = arg;
    weft_fd_wait(z->pfd[0], WEFT_IO_READ, WEFT_NEVER);
    return 0;
}

static int awaiter(void *arg)
{
    struct zoo *z = arg;
    weft_future_await(z->fut, NULL, WEFT_NEVER);
    return 0;
}

static int waits_for_go(void *arg)
{
    struct zoo *z = arg;
    weft_event_wait(&z->go);
    return 0;
}

static int joiner(void *arg)
{
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, &(weft_scope_opts){.policy = WEFT_COLLECT}),
              0);
    ASSERT(weft_spawn_ex(s, waits_for_go, arg,
                         &(weft_spawn_opts){.name = "inner"}) >= 0);
    weft_scope_join(s);
    weft_scope_free(s);
    return 0;
}

static int read_byte(void *arg)
{
    struct zoo *z = arg;
    char c;
    return read(z->bfd[0], &c, 1) == 1 ? 0 : -EIO;
}

static int blocker(void *arg)
{
    struct zoo *z = arg;
    ASSERT_EQ(weft_blocking(read_byte, arg), 0);
    weft_event_set(&z->bdone);
    return 0;
}

#define SPAWN(s, fn, z, nm)                                                    \
    ASSERT(weft_spawn_ex((s), (fn), (z), &(weft_spawn_opts){.name = (nm)}) >= 0)

/* Spawns the zoo into a new scope; returns once every one is parked. */
static void zoo_open(struct zoo *z)
{
    memset(z, 0, sizeof(*z));
    z->mu = (weft_mutex)WEFT_MUTEX_INIT;
    z->go = (weft_event)WEFT_EVENT_INIT;
    z->held = (weft_event)WEFT_EVENT_INIT;
    z->bdone = (weft_event)WEFT_EVENT_INIT;
    ASSERT_EQ(weft_chan_new(&z->chan, sizeof(int), 0), 0);
    ASSERT_EQ(pipe(z->pfd), 0);
    ASSERT_EQ(pipe(z->bfd), 0);
    ASSERT_EQ(weft_future_new(&z->fut, 0), 0);
    ASSERT_EQ(
        weft_scope_open(&z->s, &(weft_scope_opts){.policy = WEFT_COLLECT}), 0);
    SPAWN(z->s, receiver, z, "receiver");
    SPAWN(z->s, holder, z, "holder");
    SPAWN(z->s, taker, z, "taker");
    SPAWN(z->s, sleeper, z, "sleeper");
    SPAWN(z->s, reader, z, "reader");
    SPAWN(z->s, awaiter, z, "awaiter");
    SPAWN(z->s, joiner, z, "joiner");
    SPAWN(z->s, blocker, z, "blocker");
    /* One worker, virtual clock: the clock reaches 1 s only once every
     * task is parked (the blocking call's too). */
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
}

static void zoo_close(struct zoo *z)
{
    /* the blocking call returns, and its thread is done with bfd */
    ASSERT_EQ(write(z->bfd[1], "x", 1), 1);
    ASSERT_EQ(weft_event_wait(&z->bdone), 0);
    ASSERT_EQ(weft_scope_cancel(z->s), 0);
    weft_scope_join(z->s);
    ASSERT_EQ(weft_scope_free(z->s), 0);
    weft_chan_unref(z->chan);
    weft_future_unref(z->fut);
    close(z->pfd[0]);
    close(z->pfd[1]);
    close(z->bfd[0]);
    close(z->bfd[1]);
}

static int text_root(void *arg)
{
    (void)arg;
    struct zoo z;
    zoo_open(&z);
    char *s = dump_string(0);
    char l[1024], want[128];
    ASSERT(strncmp(s, "weft task dump: runtime ", 24) == 0);
    ASSERT(strstr(s, "1 workers, virtual clock, now 1.000 s\n"));
    /* the dumper itself */
    line_with(s, "\"root\"", l, sizeof(l));
    ASSERT(strstr(l, ": running on worker 0"));
    line_with(s, "\"receiver\"", l, sizeof(l));
    ASSERT(strstr(l, "test_dump.c:"));
    ASSERT(strstr(l, "parked for 1.000 s on channel receive 0x"));
    snprintf(want, sizeof(want), "%p", (void *)z.chan);
    ASSERT(strstr(l, want));
    line_with(s, "\"taker\"", l, sizeof(l));
    ASSERT(strstr(l, "on mutex 0x"));
    ASSERT(strstr(l, " held by task 1."));
    ASSERT(strstr(l, " \"holder\""));
    line_with(s, "\"holder\" (", l, sizeof(l));
    ASSERT(strstr(l, "on event"));
    line_with(s, "\"sleeper\"", l, sizeof(l));
    ASSERT(
        strstr(l, "parked for 1.000 s on sleep until 10.000 s (in 9.000 s)"));
    line_with(s, "\"reader\"", l, sizeof(l));
    snprintf(want, sizeof(want), "(fd %d, read)", z.pfd[0]);
    ASSERT(strstr(l, "on descriptor 0x"));
    ASSERT(strstr(l, want));
    line_with(s, "\"awaiter\"", l, sizeof(l));
    ASSERT(strstr(l, "on future 0x"));
    line_with(s, "\"joiner\"", l, sizeof(l));
    ASSERT(strstr(l, "on scope join 0x"));
    line_with(s, "\"inner\"", l, sizeof(l));
    ASSERT(strstr(l, "on event"));
    ASSERT(strncmp(l, "      task ", 11) == 0); /* three scopes deep */
    line_with(s, "\"blocker\"", l, sizeof(l));
    ASSERT(strstr(l, "on blocking call 0x"));
    /* the scopes: root, the zoo's (collect, owned by root), the joiner's */
    line_with(s, "scope ", l, sizeof(l));
    ASSERT(strstr(l, "(root) fail-fast, 1 running"));
    snprintf(want, sizeof(want), "  scope %p collect, 8 running, owner task ",
             (void *)z.s);
    ASSERT(strstr(s, want));
    ASSERT(strstr(s, "end of dump: 10 tasks in 3 scopes\n"));
    free(s);
    zoo_close(&z);
    return 0;
}

TEST(text_shows_each_kind_of_wait)
{
    ASSERT_EQ(t_run_virtual(1, text_root, NULL), 0);
}

/* The value of "key": in a JSON line, as text up to the next , or }. */
static const char *field(const char *line, const char *key, char *out,
                         size_t cap)
{
    char k[64];
    snprintf(k, sizeof(k), "\"%s\":", key);
    out[0] = 0;
    const char *p = strstr(line, k);
    if (!p)
        return out;
    p += strlen(k);
    size_t n = strcspn(p, ",}");
    if (n >= cap)
        n = cap - 1;
    memcpy(out, p, n);
    out[n] = 0;
    return out;
}

/* Checks every line of a JSON dump; returns the number of task lines. */
static long check_json(const char *s, long *scopes)
{
    long tasks = 0, nscopes = 0, lines = 0;
    const char *p = s;
    char line[8192], v[256];
    while (*p) {
        const char *e = strchr(p, '\n');
        ASSERT(e); /* every line ends */
        size_t n = (size_t)(e - p);
        ASSERT(n < sizeof(line));
        memcpy(line, p, n);
        line[n] = 0;
        if (!json_object(line))
            T_FAIL("not a JSON object: %s", line);
        if (lines++ == 0)
            ASSERT(strcmp(field(line, "type", v, sizeof(v)), "\"dump\"") == 0);
        if (strstr(line, "{\"type\":\"task\""))
            tasks++;
        if (strstr(line, "{\"type\":\"scope\""))
            nscopes++;
        p = e + 1;
        if (!*p) { /* the last line */
            ASSERT(strcmp(field(line, "type", v, sizeof(v)), "\"end\"") == 0);
            ASSERT_EQ(atol(field(line, "tasks", v, sizeof(v))), tasks);
            ASSERT_EQ(atol(field(line, "scopes", v, sizeof(v))), nscopes);
        }
    }
    ASSERT(lines >= 2);
    if (scopes)
        *scopes = nscopes;
    return tasks;
}

static int json_root(void *arg)
{
    (void)arg;
    struct zoo z;
    zoo_open(&z);
    char *s = dump_string(WEFT_DUMP_JSON);
    long scopes;
    ASSERT_EQ(check_json(s, &scopes), 10);
    ASSERT_EQ(scopes, 3);
    char l[2048], v[256], want[256];
    line_with(s, "\"name\":\"holder\",", l, sizeof(l));
    char holder_id[64];
    field(l, "id", holder_id, sizeof(holder_id));
    ASSERT(holder_id[0] == '"' && strncmp(holder_id, "\"1.", 3) == 0);
    line_with(s, "\"name\":\"taker\"", l, sizeof(l));
    ASSERT(strstr(l, "\"state\":\"parked\""));
    ASSERT(strstr(l, "\"kind\":\"mutex\""));
    snprintf(want, sizeof(want), "\"holder\":{\"id\":%s,\"name\":\"holder\"}",
             holder_id);
    ASSERT(strstr(l, want));
    ASSERT(strstr(l, "\"for_ns\":1000000000"));
    snprintf(want, sizeof(want), "\"scope\":\"%p\"", (void *)z.s);
    ASSERT(strstr(l, want));
    line_with(s, "\"name\":\"receiver\"", l, sizeof(l));
    ASSERT(strstr(l, "\"kind\":\"channel receive\""));
    line_with(s, "\"name\":\"reader\"", l, sizeof(l));
    snprintf(want, sizeof(want), "\"fd\":%d,\"direction\":\"read\"", z.pfd[0]);
    ASSERT(strstr(l, want));
    line_with(s, "\"name\":\"sleeper\"", l, sizeof(l));
    ASSERT(strstr(l, "\"until\":10000000000"));
    line_with(s, "\"name\":\"root\"", l, sizeof(l));
    ASSERT(strstr(l, "\"state\":\"running\",\"worker\":0"));
    ASSERT(strstr(l, "\"wait\":null"));
    line_with(s, "\"name\":\"inner\"", l, sizeof(l));
    ASSERT(strstr(l, "\"kind\":\"event\""));
    /* its chain: its scope, the zoo's, the root's */
    const char *chain = strstr(l, "\"scopes\":[");
    ASSERT(chain);
    int commas = 0;
    for (const char *c = chain; *c != ']'; c++)
        commas += *c == ',';
    ASSERT_EQ(commas, 2);
    line_with(s, "\"name\":\"joiner\"", l, sizeof(l));
    ASSERT(strstr(l, "\"kind\":\"scope join\""));
    line_with(s, "\"name\":\"blocker\"", l, sizeof(l));
    ASSERT(strstr(l, "\"kind\":\"blocking call\""));
    line_with(s, "\"name\":\"awaiter\"", l, sizeof(l));
    ASSERT(strstr(l, "\"kind\":\"future\""));
    /* the zoo's scope line */
    snprintf(want, sizeof(want), "{\"type\":\"scope\",\"id\":\"%p\"",
             (void *)z.s);
    line_with(s, want, l, sizeof(l));
    ASSERT(strstr(l, "\"policy\":\"collect\""));
    ASSERT(strstr(l, "\"running\":8"));
    ASSERT(strstr(l, "\"cancelled\":\"no\""));
    ASSERT(strcmp(field(l, "depth", v, sizeof(v)), "1") == 0);
    free(s);
    /* cancelled, with a deadline: the scope line says so */
    weft_scope *c;
    ASSERT_EQ(weft_scope_open(
                  &c, &(weft_scope_opts){.deadline = weft_now() + WEFT_SEC}),
              0);
    ASSERT_EQ(weft_scope_cancel(c), 0);
    s = dump_string(WEFT_DUMP_JSON);
    snprintf(want, sizeof(want), "{\"type\":\"scope\",\"id\":\"%p\"",
             (void *)c);
    line_with(s, want, l, sizeof(l));
    ASSERT(strstr(l, "\"deadline\":2000000000"));
    ASSERT(strstr(l, "\"cancelled\":\"user\""));
    free(s);
    s = dump_string(0);
    snprintf(want, sizeof(want), "scope %p", (void *)c);
    line_with(s, want, l, sizeof(l));
    ASSERT(strstr(l, "deadline in 1.000 s, cancelled (user)"));
    free(s);
    weft_scope_join(c);
    weft_scope_free(c);
    zoo_close(&z);
    return 0;
}

TEST(json_lines_parse_and_name_the_holder)
{
    ASSERT_EQ(t_run_virtual(1, json_root, NULL), 0);
}

/* ---- from a thread outside the runtime, while tasks come and go ---- */

struct churn {
    atomic_int done;
    int fd, dumps, rc;
    long parked;
};

static void *foreign_dumper(void *arg)
{
    struct churn *c = arg;
    for (int i = 0; i < c->dumps && !c->rc; i++)
        c->rc = weft_dump(c->fd, i % 2 ? WEFT_DUMP_JSON : 0);
    atomic_store(&c->done, 1);
    return NULL;
}

static int short_child(void *arg)
{
    (void)arg;
    weft_yield();
    return 0;
}

/* Opens scopes and spawns children that end at once, until told. */
static int churner(void *arg)
{
    struct churn *c = arg;
    while (!atomic_load(&c->done)) {
        weft_scope *s;
        ASSERT_EQ(weft_scope_open(&s, NULL), 0);
        for (int i = 0; i < 4; i++)
            ASSERT(weft_spawn_ex(s, short_child, NULL,
                                 &(weft_spawn_opts){.name = "short"}) >= 0);
        ASSERT_EQ(weft_scope_join(s), 0);
        ASSERT_EQ(weft_scope_free(s), 0);
    }
    return 0;
}

static int parked_forever(void *arg)
{
    (void)arg;
    weft_sleep_for(WEFT_NEVER / 2);
    return 0;
}

static int join_thread(void *arg)
{
    return pthread_join(*(pthread_t *)arg, NULL) ? -EIO : 0;
}

static int churn_root(void *arg)
{
    struct churn *c = arg;
    weft_scope *p;
    ASSERT_EQ(weft_scope_open(&p, NULL), 0);
    for (long i = 0; i < c->parked; i++)
        ASSERT(weft_spawn_ex(p, parked_forever, NULL,
                             &(weft_spawn_opts){.name = "idler"}) >= 0);
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    for (int i = 0; i < 4; i++)
        ASSERT(weft_spawn_ex(s, churner, c,
                             &(weft_spawn_opts){.name = "churner"}) >= 0);
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, foreign_dumper, c), 0);
    ASSERT_EQ(weft_blocking(join_thread, &th), 0);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(weft_scope_cancel(p), 0);
    weft_scope_join(p);
    ASSERT_EQ(weft_scope_free(p), 0);
    return 0;
}

TEST(foreign_thread_dumps_while_tasks_run_on_two_workers)
{
    /* The smallest buffer: the dump lets go of its locks, writes and
     * comes back after every few lines, while scopes open and close. */
    weft__dump_buf_size = 0;
    struct churn c = {.fd = temp_fd(), .dumps = 6, .parked = T_LIVE(2000)};
    ASSERT_EQ(t_run_mono(2, churn_root, &c), 0);
    ASSERT_EQ(c.rc, 0);
    char *s = slurp(c.fd);
    close(c.fd);
    /* six dumps, text and JSON in turn, each whole; every parked task
     * (which stays) is in every one, once */
    ASSERT_EQ(count_matching(s, "end of dump: "), 3);
    ASSERT_EQ(count_matching(s, "{\"type\":\"end\""), 3);
    ASSERT_EQ(count_matching(s, "\"idler\""), 6 * c.parked);
    const char *p;
    /* each JSON line is an object */
    char line[8192];
    long checked = 0;
    for (p = s; *p;) {
        const char *e = strchr(p, '\n');
        ASSERT(e);
        size_t n = (size_t)(e - p);
        ASSERT(n < sizeof(line));
        memcpy(line, p, n);
        line[n] = 0;
        if (line[0] == '{') {
            if (!json_object(line))
                T_FAIL("not a JSON object: %s", line);
            checked++;
        }
        p = e + 1;
    }
    ASSERT(checked >= 3 * (c.parked + 2));
    free(s);
}

/* ---- 100,000 parked tasks ---- */

struct big {
    long n;
    int groups;
};

static int group(void *arg)
{
    struct big *b = arg;
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, &(weft_scope_opts){.policy = WEFT_SERVE}), 0);
    for (long i = 0; i < b->n / b->groups; i++)
        ASSERT(weft_spawn_ex(s, parked_forever, NULL,
                             &(weft_spawn_opts){.name = "many"}) >= 0);
    weft_scope_join(s);
    weft_scope_free(s);
    return 0;
}

static int big_root(void *arg)
{
    struct big *b = arg;
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    for (int i = 0; i < b->groups; i++)
        ASSERT(weft_spawn_ex(s, group, b,
                             &(weft_spawn_opts){.name = "group"}) >= 0);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0); /* every task is parked */
    long many = b->n / b->groups * b->groups;
    char *d = dump_string(WEFT_DUMP_JSON);
    long scopes;
    ASSERT_EQ(check_json(d, &scopes), 1 + b->groups + many);
    ASSERT_EQ(scopes, 2 + b->groups);
    ASSERT_EQ(slice_lines(d), 1);
    ASSERT_EQ(count_lines(d) - 1, 2 + scopes + 1 + b->groups + many);
    ASSERT_EQ(count_matching(d, "\"kind\":\"sleep\""), many);
    free(d);
    d = dump_string(0);
    char want[128];
    snprintf(want, sizeof(want), "end of dump: %ld tasks in %ld scopes",
             1 + b->groups + many, scopes);
    ASSERT_EQ(count_matching(d, want), 1);
    ASSERT_EQ(count_matching(d, "\"many\" ("), many);
    ASSERT(slice_lines(d) >= 1); /* at least the count of slow slices */
    ASSERT_EQ(count_lines_but_where(d) - slice_lines(d),
              2 + scopes + 1 + b->groups + many);
    free(d);
    ASSERT_EQ(weft_scope_cancel(s), 0);
    weft_scope_join(s);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

TEST(dump_of_100k_parked_tasks)
{
    struct big b = {.n = T_LIVE(100000), .groups = 10};
    ASSERT_EQ(t_run_virtual(1, big_root, &b), 0);
}

/* fork() for the SIGQUIT tests: a child that goes on running after its
 * parent failed an assertion would hold the test's output open, and the
 * harness would wait for it to its timeout; so the child dies with its
 * parent. */
static pid_t fork_tied(void)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0 && (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 ||
                     getppid() != parent)) /* the parent is gone already */
        _exit(127);
    return pid;
}

/* ---- SIGQUIT under weft_main ---- */

/* arg: how many more tasks park beside the napper (a long), 0 for none */
static int sigquit_root(void *arg)
{
    long more = arg ? *(long *)arg : 0;
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    ASSERT(weft_spawn_ex(s, parked_forever, NULL,
                         &(weft_spawn_opts){.name = "napper"}) >= 0);
    for (long i = 0; i < more; i++)
        ASSERT(weft_spawn_ex(s, parked_forever, NULL,
                             &(weft_spawn_opts){.name = "crowd"}) >= 0);
    ASSERT_EQ(weft_yield(), 0);
    ASSERT_EQ(kill(getpid(), SIGQUIT), 0);
    /* goes on: the parent reads the dump, then asks for a shutdown */
    int rc = weft_shutdown_wait(WEFT_NEVER); /* the request's cancel may */
    ASSERT(rc == 0 || rc == -ECANCELED);     /* come before the wait */
    weft_scope_cancel(s);
    weft_scope_join(s);
    weft_scope_free(s);
    return 7;
}

TEST(sigquit_dumps_to_stderr_and_goes_on)
{
    int ep[2];
    ASSERT_EQ(pipe(ep), 0);
    pid_t pid = fork_tied();
    ASSERT(pid >= 0);
    if (pid == 0) {
        close(ep[0]);
        dup2(ep[1], 2);
        weft_config cfg = {.workers = 1}; /* the napper parks at the yield */
        _exit(weft_main_cfg(&cfg, sigquit_root, NULL));
    }
    close(ep[1]);
    char out[16384];
    size_t n = 0;
    while (n + 1 < sizeof(out) && !memmem(out, n, "end of dump", 11)) {
        ssize_t k = read(ep[0], out + n, sizeof(out) - 1 - n);
        ASSERT(k > 0);
        n += (size_t)k;
    }
    out[n] = 0;
    ASSERT(strstr(out, "weft task dump: runtime "));
    char l[1024];
    line_with(out, "\"napper\"", l, sizeof(l));
    ASSERT(strstr(l, "parked for "));
    ASSERT(strstr(l, "on sleep "));
    if (weft__where_lines()) { /* where it sleeps, and its whole stack */
        const char *p = strchr(strstr(out, "\"napper\""), '\n');
        ASSERT(p);
        line_with(p + 1, "", l, sizeof(l));
        ASSERT(strstr(l, "at parked_forever (test/test_dump.c:"));
        p = strchr(p + 1, '\n');
        ASSERT(p);
        line_with(p + 1, "", l, sizeof(l));
        if (!strstr(l, "#0 weft_sleep_"))
            T_FAIL("no #0 weft_sleep_* frame in:\n%s", out);
        ASSERT(count_matching(out, "parked_forever (test/test_dump.c:") == 2);
    }
    ASSERT_EQ(kill(pid, SIGTERM), 0); /* the child still runs */
    ssize_t k;
    while (n + 1 < sizeof(out) &&
           (k = read(ep[0], out + n, sizeof(out) - 1 - n)) > 0)
        n += (size_t)k; /* the rest, to the child's end */
    out[n] = 0;
    int st;
    ASSERT_EQ(waitpid(pid, &st, 0), pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 7)
        T_FAIL("child status %#x, stderr:\n%s", st, out);
    close(ep[0]);
}

/* SIGQUIT's dump, stacks and all, of 10,000 parked tasks: whole, every
 * task with its line and stack, in the harness's time. */
TEST(sigquit_dump_of_10k_parked_tasks_with_stacks)
{
    static long more;
    more = T_LIVE(10000);
    int ep[2];
    ASSERT_EQ(pipe(ep), 0);
    pid_t pid = fork_tied();
    ASSERT(pid >= 0);
    if (pid == 0) {
        close(ep[0]);
        dup2(ep[1], 2);
        weft_config cfg = {.workers = 1};
        _exit(weft_main_cfg(&cfg, sigquit_root, &more));
    }
    close(ep[1]);
    size_t cap = 4096, n = 0;
    char *out = malloc(cap);
    ASSERT(out);
    for (;;) { /* to the dump's end line */
        if (cap - n < 2048) {
            cap *= 2;
            out = realloc(out, cap);
            ASSERT(out);
        }
        ssize_t k = read(ep[0], out + n, cap - 1 - n);
        ASSERT(k > 0);
        n += (size_t)k;
        out[n] = 0;
        const char *e = strstr(out, "end of dump: ");
        if (e && strchr(e, '\n'))
            break;
    }
    char want[64];
    snprintf(want, sizeof want, "end of dump: %ld tasks", more + 2);
    ASSERT(strstr(out, want));
    ASSERT_EQ(count_matching(out, "\"crowd\" ("), more);
    if (weft__where_lines()) {
        ASSERT_EQ(count_matching(out, "at parked_forever (test/test_dump.c:"),
                  more + 1);
        ASSERT_EQ(count_matching(out, "#0 weft_sleep_"), more + 1);
    }
    ASSERT_EQ(kill(pid, SIGTERM), 0);
    char rest[4096];
    while (read(ep[0], rest, sizeof rest) > 0)
        ;
    int st;
    ASSERT_EQ(waitpid(pid, &st, 0), pid);
    ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 7);
    close(ep[0]);
    free(out);
}

static int quiet_root(void *arg)
{
    (void)arg;
    kill(getpid(), SIGQUIT);
    weft_shutdown_wait(WEFT_NEVER);
    return 0;
}

TEST(sigquit_dump_off_keeps_the_default_action)
{
    pid_t pid = fork_tied();
    ASSERT(pid >= 0);
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 2);
        signal(SIGQUIT, SIG_DFL);
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core); /* no core file left behind */
        weft_config cfg = {.workers = 1, .sigquit_dump = -1};
        _exit(weft_main_cfg(&cfg, quiet_root, NULL));
    }
    int st;
    ASSERT_EQ(waitpid(pid, &st, 0), pid);
    ASSERT(WIFSIGNALED(st));
    ASSERT_EQ(WTERMSIG(st), SIGQUIT);
}

/* ---- where each task blocks: the line of its weft call ---- */

/* Each waiter records the line of its blocking call (AT expands __LINE__
 * on the line of the call), and uses the call's result after it, so that
 * the compiler cannot make it a tail call (whose caller's frame would be
 * gone from the stack: the line shown would be the caller's caller). */
enum {
    S_RECV,
    S_SEND,
    S_MUTEX,
    S_FUTURE,
    S_SLEEP,
    S_JOIN,
    S_SELECT,
    S_FD,
    S_ACTOR,
    S_EVENT,
    S_SEM,
    S_COND,
    S_SCOPE,
    S_ASK,
    S_KINDS
};
static const char *const site_name[S_KINDS] = {
    "s recv", "s send",   "s mutex", "s future", "s sleep",
    "s join", "s select", "s fd",    "s actor",  "s event",
    "s sem",  "s cond",   "s scope", "s ask"};
static int site_line[S_KINDS];
#define AT(k, call) (site_line[k] = __LINE__, (call))

struct sites {
    weft_chan *chan, *full, *other;
    weft_mutex mu, cvmu;
    weft_event held, go;
    weft_future *fut;
    weft_sem sem;
    weft_cond cv;
    int pfd[2];
    weft_actor *mute; /* an actor whose behaviour waits for go */
    weft_actor *idle; /* an actor waiting for a message */
};

static int gone(int rc) /* what a cancelled wait returns */
{
    return rc == -ECANCELED ? 0 : rc == 0 ? -EPROTO : rc;
}

static int s_recv(void *arg)
{
    struct sites *x = arg;
    int v;
    int rc = AT(S_RECV, weft_chan_recv(x->chan, &v));
    return gone(rc);
}

static int s_send(void *arg)
{
    struct sites *x = arg;
    int v = 1;
    int rc = AT(S_SEND, weft_chan_send(x->full, &v));
    return gone(rc);
}

static int s_holder(void *arg)
{
    struct sites *x = arg;
    ASSERT_EQ(weft_mutex_lock(&x->mu), 0);
    weft_event_set(&x->held);
    weft_event_wait(&x->go);
    ASSERT_EQ(weft_mutex_unlock(&x->mu), 0);
    return 0;
}

static int s_mutex(void *arg)
{
    struct sites *x = arg;
    ASSERT_EQ(weft_event_wait(&x->held), 0);
    int rc = AT(S_MUTEX, weft_mutex_lock(&x->mu));
    if (rc == 0)
        weft_mutex_unlock(&x->mu);
    return gone(rc == 0 ? -ECANCELED : rc);
}

static int s_future(void *arg)
{
    struct sites *x = arg;
    int rc = AT(S_FUTURE, weft_future_await(x->fut, NULL, WEFT_NEVER));
    return gone(rc);
}

static int s_sleep(void *arg)
{
    (void)arg;
    int rc = AT(S_SLEEP, weft_sleep_for(100 * WEFT_SEC));
    return gone(rc);
}

static int s_waits_for_go(void *arg)
{
    struct sites *x = arg;
    return gone(weft_event_wait(&x->go));
}

static int s_join(void *arg)
{
    weft_task_handle h;
    weft_spawn_opts o = {.name = "joinee", .handle = &h};
    ASSERT(weft_spawn_ex(NULL, s_waits_for_go, arg, &o) >= 0);
    int st = 0;
    int rc = AT(S_JOIN, weft_task_join(h, &st));
    if (rc == -ECANCELED)
        weft_task_detach(h);
    return gone(rc);
}

static int s_select(void *arg)
{
    struct sites *x = arg;
    int v;
    weft_case c[2] = {{.chan = x->other, .op = WEFT_OP_RECV, .elem = &v},
                      {.op = WEFT_OP_READ, .fd = x->pfd[0]}};
    int rc = AT(S_SELECT, weft_select(c, 2, WEFT_NEVER));
    return gone(rc);
}

static int s_fd(void *arg)
{
    struct sites *x = arg;
    int rc = AT(S_FD, weft_fd_wait(x->pfd[0], WEFT_IO_READ, WEFT_NEVER));
    return gone(rc);
}

static int quiet_behaviour(void *state, weft_actor_msg *m)
{
    (void)state;
    (void)m;
    return 0;
}

static int s_actor(void *arg)
{
    (void)arg;
    weft_actor_opts o = {
        .fn = quiet_behaviour, .msg_size = sizeof(int), .capacity = 1};
    int rc = AT(S_ACTOR, weft_actor_run(&o));
    return gone(rc);
}

static int s_event(void *arg)
{
    struct sites *x = arg;
    int rc = AT(S_EVENT, weft_event_wait(&x->go));
    return gone(rc);
}

static int s_sem(void *arg)
{
    struct sites *x = arg;
    int rc = AT(S_SEM, weft_sem_acquire(&x->sem, 1));
    return gone(rc);
}

static int s_cond(void *arg)
{
    struct sites *x = arg;
    ASSERT_EQ(weft_mutex_lock(&x->cvmu), 0);
    int rc = AT(S_COND, weft_cond_wait(&x->cv, &x->cvmu));
    weft_mutex_unlock(&x->cvmu);
    return gone(rc);
}

static int s_scope(void *arg)
{
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, &(weft_scope_opts){.policy = WEFT_COLLECT}),
              0);
    ASSERT(weft_spawn_ex(s, s_waits_for_go, arg,
                         &(weft_spawn_opts){.name = "scoped"}) >= 0);
    int rc = AT(S_SCOPE, weft_scope_join(s));
    weft_scope_free(s);
    return rc == 0 ? 0 : gone(rc);
}

static int mute_behaviour(void *state, weft_actor_msg *m)
{
    struct sites *x = state;
    (void)m;
    weft_event_wait(&x->go); /* never replies before the end */
    return 0;
}

static int s_ask(void *arg)
{
    struct sites *x = arg;
    int q = 1;
    int rc = AT(S_ASK, weft_actor_ask(x->mute, &q, NULL, WEFT_NEVER));
    return rc == -ECANCELED || rc == -ENOMSG || rc == -ESRCH ? 0 : -EPROTO;
}

static weft_fn const site_fn[S_KINDS] = {
    s_recv, s_send,  s_mutex, s_future, s_sleep, s_join,  s_select,
    s_fd,   s_actor, s_event, s_sem,    s_cond,  s_scope, s_ask};

/* The line after the task line of the task named name: its "at" line. */
static const char *where_line(const char *dump, const char *name, char *out,
                              size_t cap)
{
    char q[64];
    snprintf(q, sizeof(q), "\"%s\" (", name);
    out[0] = 0;
    const char *p = strstr(dump, q);
    ASSERT(p);
    p = strchr(p, '\n');
    ASSERT(p);
    return line_with(p + 1, "", out, cap);
}

static void sites_open(struct sites *x, weft_scope **s)
{
    memset(x, 0, sizeof(*x));
    x->mu = (weft_mutex)WEFT_MUTEX_INIT;
    x->cvmu = (weft_mutex)WEFT_MUTEX_INIT;
    x->held = (weft_event)WEFT_EVENT_INIT;
    x->go = (weft_event)WEFT_EVENT_INIT;
    x->cv = (weft_cond)WEFT_COND_INIT;
    ASSERT_EQ(weft_sem_init(&x->sem, 0), 0);
    ASSERT_EQ(weft_chan_new(&x->chan, sizeof(int), 0), 0);
    ASSERT_EQ(weft_chan_new(&x->full, sizeof(int), 0), 0);
    ASSERT_EQ(weft_chan_new(&x->other, sizeof(int), 0), 0);
    ASSERT_EQ(weft_future_new(&x->fut, 0), 0);
    ASSERT_EQ(pipe(x->pfd), 0);
    ASSERT_EQ(weft_scope_open(s, &(weft_scope_opts){.policy = WEFT_COLLECT}),
              0);
    weft_actor_opts mo = {.fn = mute_behaviour,
                          .state = x,
                          .msg_size = sizeof(int),
                          .capacity = 1,
                          .name = "mute"};
    ASSERT_EQ(weft_actor_spawn(*s, &mo, &x->mute), 0);
    weft_actor_opts io = {.fn = quiet_behaviour,
                          .msg_size = sizeof(int),
                          .capacity = 1,
                          .name = "idle"};
    ASSERT_EQ(weft_actor_spawn(*s, &io, &x->idle), 0);
    SPAWN(*s, s_holder, x, "s holder");
    for (int k = 0; k < S_KINDS; k++)
        SPAWN(*s, site_fn[k], x, site_name[k]);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0); /* every one is parked */
}

static void sites_close(struct sites *x, weft_scope *s)
{
    ASSERT_EQ(weft_scope_cancel(s), 0);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    for (int k = 0; k < S_KINDS; k++) { /* each wait ended by the cancel */
        int st = 1;
        ASSERT_EQ(weft_scope_status(s, 3 + k, &st), 0); /* after the actors and
                                                         * the holder */
        if (st != 0)
            T_FAIL("%s returned %d", site_name[k], st);
    }
    ASSERT_EQ(weft_scope_free(s), 0);
    weft_actor_unref(x->mute);
    weft_actor_unref(x->idle);
    weft_chan_unref(x->chan);
    weft_chan_unref(x->full);
    weft_chan_unref(x->other);
    weft_future_unref(x->fut);
    close(x->pfd[0]);
    close(x->pfd[1]);
}

static int where_root(void *arg)
{
    (void)arg;
    struct sites x;
    weft_scope *s;
    sites_open(&x, &s);
    char *d = dump_string(0);
    char l[1024], want[64];
    for (int k = 0; k < S_KINDS; k++) {
        where_line(d, site_name[k], l, sizeof(l));
        snprintf(want, sizeof(want), "test_dump.c:%d)", site_line[k]);
        if (!strstr(l, "at ") || !strstr(l, want))
            T_FAIL("%s: wants \"at ... %s\", has \"%s\"", site_name[k], want,
                   l);
    }
    /* An actor's behaviour that blocks: the behaviour's line. */
    where_line(d, "mute", l, sizeof(l));
    ASSERT(strstr(l, "at mute_behaviour (test/test_dump.c:"));
    /* An actor between messages has no weft call of its own on its stack
     * (its loop is weft's): its behaviour stands for it. */
    where_line(d, "idle", l, sizeof(l));
    ASSERT(strstr(l, "at the mailbox of behaviour quiet_behaviour "
                     "(test/test_dump.c:"));
    /* the dumper, running, has none */
    where_line(d, "root", l, sizeof(l));
    ASSERT(!strstr(l, "at "));
    free(d);

    /* JSON: the same, as "where", and every line still parses */
    d = dump_string(WEFT_DUMP_JSON);
    ASSERT(check_json(d, NULL) > S_KINDS);
    for (int k = 0; k < S_KINDS; k++) {
        char q[64];
        snprintf(q, sizeof(q), "\"name\":\"%s\"", site_name[k]);
        line_with(d, q, l, sizeof(l));
        snprintf(want, sizeof(want), "test_dump.c\",\"line\":%d,",
                 site_line[k]);
        const char *w = strstr(l, "\"where\":{\"function\":");
        if (!w || !strstr(w, want))
            T_FAIL("%s: no where with %s in %s", site_name[k], want, l);
    }
    ASSERT(!strstr(d, "\"stack\":"));
    free(d);

    /* The same line for one task, as the watchdog would ask for it; a
     * running task (this one) has no saved registers to walk. */
    char buf[256];
    weft_task *recv = NULL;
    for (weft_task *t = s->members; t; t = weft__scope_of_task(t)->mnext)
        if (t->name && strcmp(t->name, site_name[S_RECV]) == 0)
            recv = t;
    ASSERT(recv);
    ASSERT_EQ(weft__where_format(recv, buf, sizeof(buf)), 0);
    snprintf(want, sizeof(want), "s_recv (test/test_dump.c:%d)",
             site_line[S_RECV]);
    if (strcmp(buf, want) != 0)
        T_FAIL("where_format: \"%s\", not \"%s\"", buf, want);
    ASSERT_EQ(weft__where_format(weft__current(), buf, sizeof(buf)), -EBUSY);
    ASSERT_EQ(buf[0], 0);
    sites_close(&x, s);
    return 0;
}

TEST(dump_names_the_line_each_task_blocks_on)
{
    if (!weft__where_lines())
        T_NEED("libdw", "weft built without libdw (no lines)");
    ASSERT_EQ(t_run_virtual(1, where_root, NULL), 0);
}

/* Its frames, from the weft call down, name the test's own functions. */
static void check_stack(const char *d, const char *name, const char *caller,
                        const char *call, int line)
{
    char q[64], l[1024], want[96];
    snprintf(q, sizeof(q), "\"%s\" (", name);
    const char *p = strstr(d, q);
    ASSERT(p);
    p = strchr(p, '\n') + 1;
    line_with(p, "", l, sizeof(l)); /* at ... */
    ASSERT(strstr(l, "at "));
    p = strchr(p, '\n') + 1;
    line_with(p, "", l, sizeof(l)); /* #0: the weft call */
    if (!strstr(l, "#0 ") || !strstr(l, call))
        T_FAIL("%s: #0 should be %s: %s", name, call, l);
    snprintf(want, sizeof(want), "%s (test/test_dump.c:%d)", caller, line);
    bool found = false;
    for (int i = 0; i < 8 && !found; i++) {
        p = strchr(p, '\n') + 1;
        line_with(p, "", l, sizeof(l));
        found = strstr(l, want) != NULL;
    }
    if (!found)
        T_FAIL("%s: no frame \"%s\" in its stack", name, want);
}

static int stacks_root(void *arg)
{
    (void)arg;
    struct sites x;
    weft_scope *s;
    sites_open(&x, &s);
    char *d = dump_string(WEFT_DUMP_STACKS);
    check_stack(d, "s recv", "s_recv",
                "weft_chan_recv (src/sync/chan.c:", site_line[S_RECV]);
    check_stack(d, "s mutex", "s_mutex",
                "weft_mutex_lock (src/sync/sync.c:", site_line[S_MUTEX]);
    check_stack(d, "s select", "s_select",
                "weft_select (src/select/select.c:", site_line[S_SELECT]);
    check_stack(d, "s actor", "s_actor",
                "weft_actor_run (src/actor/actor.c:", site_line[S_ACTOR]);
    /* the frames go on below the test's function: the task's start */
    ASSERT(strstr(d, "weft__task_main (src/sched/sched.c:"));
    free(d);
    d = dump_string(WEFT_DUMP_JSON | WEFT_DUMP_STACKS);
    ASSERT(check_json(d, NULL) > S_KINDS);
    char l[8192], want[96];
    line_with(d, "\"name\":\"s recv\"", l, sizeof(l));
    snprintf(want, sizeof(want),
             "{\"function\":\"s_recv\",\"file\":\"test/test_dump.c\","
             "\"line\":%d,",
             site_line[S_RECV]);
    const char *st = strstr(l, "\"stack\":[{\"function\":\"weft_chan_recv\"");
    ASSERT(st && strstr(st, want));
    free(d);
    sites_close(&x, s);
    return 0;
}

TEST(stacks_walk_each_parked_task)
{
    if (!weft__where_lines())
        T_NEED("libdw", "weft built without libdw (no lines)");
    ASSERT_EQ(t_run_virtual(1, stacks_root, NULL), 0);
}

/* ---- 10,000 parked tasks, their stacks dumped from a plain thread ---- */

static int parked_here(void *arg)
{
    weft_chan *c = arg;
    int v;
    int rc = AT(S_RECV, weft_chan_recv(c, &v));
    return gone(rc);
}

struct many {
    long n;
    int fd;
    int rc;
    weft_chan *c;
    long grew_kb; /* the peak RSS's growth during the dump */
};

static void *plain_dumper(void *arg)
{
    struct many *m = arg;
    m->rc = weft_dump(m->fd, WEFT_DUMP_STACKS);
    return NULL;
}

static int dump_from_thread(void *arg) /* a weft_blocking job */
{
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, plain_dumper, arg), 0);
    ASSERT_EQ(pthread_join(th, NULL), 0);
    return 0;
}

static int many_root(void *arg)
{
    struct many *m = arg;
    weft_scope *s;
    ASSERT_EQ(weft_chan_new(&m->c, sizeof(int), 0), 0);
    ASSERT_EQ(weft_scope_open(&s, &(weft_scope_opts){.policy = WEFT_SERVE}), 0);
    for (long i = 0; i < m->n; i++)
        ASSERT(weft_spawn_ex(s, parked_here, m->c,
                             &(weft_spawn_opts){.name = "p"}) >= 0);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0); /* every one is parked */
    /* a thread of no runtime dumps, while this task waits for it */
    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    ASSERT_EQ(weft_blocking(dump_from_thread, m), 0);
    getrusage(RUSAGE_SELF, &r1);
    m->grew_kb = r1.ru_maxrss - r0.ru_maxrss;
    ASSERT_EQ(weft_scope_cancel(s), 0);
    weft_scope_join(s);
    ASSERT_EQ(weft_scope_free(s), 0);
    weft_chan_unref(m->c);
    return 0;
}

TEST(stacks_of_10k_parked_tasks_from_a_plain_thread)
{
    struct many m = {.n = T_LIVE(10000), .fd = temp_fd()};
    ASSERT_EQ(t_run_virtual(1, many_root, &m), 0);
    ASSERT_EQ(m.rc, 0);
    char *d = slurp(m.fd);
    close(m.fd);
    ASSERT(strstr(d, "end of dump: "));
    if (weft__where_lines()) {
        /* every task: its "at" line and its frame, at the parking line */
        char at[96], frame[96];
        snprintf(at, sizeof(at), "at parked_here (test/test_dump.c:%d)",
                 site_line[S_RECV]);
        snprintf(frame, sizeof(frame), "parked_here (test/test_dump.c:%d)",
                 site_line[S_RECV]);
        ASSERT_EQ(count_matching(d, at), m.n);
        ASSERT_EQ(count_matching(d, frame), 2 * m.n);
    }
    /* bounded: each task's lines take a few hundred bytes, however many
     * frames its stack has */
    long size = (long)strlen(d);
    if (size > 1024 * m.n)
        T_FAIL("%ld bytes for %ld tasks", size, m.n);
    free(d);
    /* the dump's memory does not grow with the tasks: its buffer, a cache
     * of symbols of a fixed size, and the program's debug information
     * (a few MiB, whatever the number of tasks) */
    if (getenv("T_SHOW_DUMP"))
        fprintf(stderr, "the dump's peak: +%ld KiB\n", m.grew_kb);
        /* (ASan keeps freed memory in quarantine: not measured there) */
#if !defined(WEFT_TEST_EMULATED) && !defined(WEFT_ASAN)
    if (m.grew_kb > 48 * 1024)
        T_FAIL("the dump took %ld KiB", m.grew_kb);
#endif
}

/* ---- compact tasks: a stack given back is walked from its image ---- */

static int compact_line; /* the line of compact_recv's receive */

static int compact_recv(void *arg)
{
    weft_chan *c = arg;
    int v = 0;
    int rc = (compact_line = __LINE__, weft_chan_recv(c, &v));
    return rc < 0 ? rc : v == 1 ? 0 : -EIO;
}

static int compact_root(void *arg)
{
    (void)arg;
    weft_chan *c;
    weft_scope *s;
    ASSERT_EQ(weft_chan_new(&c, sizeof(int), 0), 0);
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    long base = atomic_load(&weft__stacks_released);
    ASSERT(weft_spawn_ex(
               s, compact_recv, c,
               &(weft_spawn_opts){.name = "compact recv", .compact = 1}) >= 0);
    ASSERT_EQ(weft_sleep_for(WEFT_MSEC), 0); /* idle: its stack given back */
    ASSERT_EQ(atomic_load(&weft__stacks_released), base + 1);
    char *d = dump_string(WEFT_DUMP_STACKS);
    check_stack(d, "compact recv", "compact_recv",
                "weft_chan_recv (src/sync/chan.c:", compact_line);
    /* down to its first frame: the image's top part is read too (the
     * dumper, running, has no stack walked) */
    ASSERT(strstr(d, "weft__task_main (src/sched/sched.c:"));
    free(d);
    /* the walk left it as it was: the value reaches it */
    int one = 1;
    ASSERT_EQ(weft_chan_send(c, &one), 0);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    weft_chan_unref(c);
    return 0;
}

TEST(stacks_walk_a_compact_task_whose_stack_was_given_back)
{
    if (!weft__where_lines())
        T_NEED("libdw", "weft built without libdw (no lines)");
    ASSERT_EQ(t_run_virtual(1, compact_root, NULL), 0);
}

/* Compact tasks park deeper each round, so that their worker replaces
 * their images by larger ones, while a plain thread dumps their stacks
 * without a pause: no read of a freed image (ASan checks the walk's
 * reads of images: without the image lock every run reported a
 * heap-use-after-free), no deadlock between the walks and the worker
 * over that lock, no race on what both touch (TSan), no value lost. */
#define DEEP_TASKS 8
#define DEEP_DUMPS 20

struct deep {
    weft_chan *c[DEEP_TASKS];
    long rounds;
    atomic_bool stop;
    atomic_long dumps;
    int rc;
};

static int deep_recv(weft_chan *c, int depth, int *v)
{
    volatile char pad[96]; /* each level deepens the stack */
    pad[0] = (char)depth;
    if (depth > 0) /* pad read after the call: not a tail call */
        return deep_recv(c, depth - 1, v) + pad[0] - (char)depth;
    return weft_chan_recv(c, v);
}

static int deep_task(void *arg)
{
    weft_chan *c = arg;
    for (int r = 0;; r++) {
        int v;
        int rc = deep_recv(c, r % 64, &v);
        if (rc == -EPIPE)
            return 0;
        if (rc < 0 || v != r)
            return rc < 0 ? rc : -EIO;
    }
}

static void *deep_dumper(void *arg)
{
    struct deep *x = arg;
    int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    do {
        int rc = weft_dump(fd, WEFT_DUMP_STACKS);
        if (rc < 0)
            x->rc = rc;
        atomic_fetch_add(&x->dumps, 1);
    } while (!atomic_load(&x->stop));
    close(fd);
    return NULL;
}

static int deep_root(void *arg)
{
    struct deep *x = arg;
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    for (int i = 0; i < DEEP_TASKS; i++) {
        ASSERT_EQ(weft_chan_new(&x->c[i], sizeof(int), 0), 0);
        ASSERT(weft_spawn_ex(s, deep_task, x->c[i],
                             &(weft_spawn_opts){.compact = 1}) >= 0);
    }
    long base = atomic_load(&weft__stacks_released);
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, deep_dumper, x), 0);
    /* the rounds asked for, and on until the dumper has made a few
     * dumps beside them (each round takes microseconds, a dump more) */
    int r = 0;
    for (; r < x->rounds ||
           (atomic_load(&x->dumps) < DEEP_DUMPS && r < 1000 * x->rounds);
         r++) {
        ASSERT_EQ(weft_sleep_for(WEFT_MSEC), 0); /* idle: given back */
        for (int i = 0; i < DEEP_TASKS; i++)
            ASSERT_EQ(weft_chan_send(x->c[i], &r), 0);
    }
    for (int i = 0; i < DEEP_TASKS; i++)
        ASSERT_EQ(weft_chan_close(x->c[i]), 0);
    ASSERT_EQ(weft_scope_join(s), 0); /* every value reached its task */
    atomic_store(&x->stop, true);
    ASSERT_EQ(pthread_join(th, NULL), 0);
    ASSERT(atomic_load(&weft__stacks_released) - base >= (long)DEEP_TASKS * r);
    x->rounds = r;
    ASSERT_EQ(weft_scope_free(s), 0);
    for (int i = 0; i < DEEP_TASKS; i++)
        weft_chan_unref(x->c[i]);
    return 0;
}

TEST(dumps_beside_compact_tasks_whose_images_grow)
{
    struct deep x = {.rounds = T_LIVE(300)};
    ASSERT_EQ(t_run_virtual(1, deep_root, &x), 0);
    ASSERT_EQ(x.rc, 0);
    ASSERT(atomic_load(&x.dumps) >= DEEP_DUMPS);
    if (getenv("T_SHOW_DUMP"))
        fprintf(stderr, "%ld rounds, %ld dumps\n", x.rounds,
                atomic_load(&x.dumps));
}

/* ---- errors ---- */

static int errors_root(void *arg)
{
    (void)arg;
    ASSERT_EQ(weft_dump(1, 4), -EINVAL);
    ASSERT_EQ(weft_dump(1, ~0u), -EINVAL);
    ASSERT_EQ(weft_dump(-1, 0), -EBADF);
    int fd = temp_fd();
    close(fd);
    ASSERT_EQ(weft_dump(fd, 0), -EBADF);
    int p[2];
    ASSERT_EQ(pipe(p), 0);
    close(p[0]);
    signal(SIGPIPE, SIG_IGN);
    ASSERT_EQ(weft_dump(p[1], WEFT_DUMP_JSON), -EPIPE);
    close(p[1]);
    return 0;
}

TEST(errors)
{
    ASSERT_EQ(weft_dump(1, 0), -ESRCH); /* no runtime runs */
    ASSERT_EQ(weft_dump(1, 4), -EINVAL);
    ASSERT_EQ(t_run_virtual(1, errors_root, NULL), 0);
    ASSERT_EQ(weft_dump(1, WEFT_DUMP_JSON), -ESRCH);
}
