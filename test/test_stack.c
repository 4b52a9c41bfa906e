/* SPDX-License-Identifier: MIT */
/*
 * Stacks: overflow detection and reporting, reuse of stacks, their tops
 * spread over the cache's sets, lazy commit of stack memory, valgrind
 * registrations undone, and custom stacks freed at the kernel's limit on
 * mappings.
 */
#include "sched/scheduler.h" /* weft__stacks_registered, weft__pool_trim */
#include "t.h"
#include "weft.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(WEFT_ASAN) || defined(WEFT_TSAN)
#define SANITIZED 1
#else
#define SANITIZED 0
#endif
/* TSan's shadow memory and per-fiber state (about 1 MB a task) swamp the
 * figures, as does qemu-user's translation cache under emulation: the
 * memory checks are not made there. */
#if defined(WEFT_TSAN) || defined(WEFT_TEST_EMULATED)
#define CHECK_RSS 0
#else
#define CHECK_RSS 1
#endif

static long max_rss_kib(void)
{
    struct rusage ru;
    ASSERT_EQ(getrusage(RUSAGE_SELF, &ru), 0);
    return ru.ru_maxrss;
}

/* ---- overflow --------------------------------------------------------- */

/* Unbounded recursion with 1 KiB a frame (the limit is never reached, but
 * the compiler cannot know); the use of buf after the call keeps it from
 * becoming a loop or a tail call. */
static volatile int overflow_limit = 0x7fffffff;

__attribute__((noinline)) static int overflow(int depth)
{
    volatile char buf[1024];
    if (depth >= overflow_limit)
        return 0;
    buf[0] = (char)depth;
    buf[sizeof buf - 1] = (char)depth;
    return overflow(depth + 1) + buf[0] + buf[sizeof buf - 1];
}

static int overflower(void *arg)
{
    (void)arg;
    ASSERT_EQ(weft_sleep_for(WEFT_MSEC), 0); /* overflow after a switch */
    return overflow(0);
}

struct ovf {
    int workers;
    size_t stack_size;
    const char *name;
    int compact; /* weft_spawn_opts.compact */
};

static int only_named_root(void *arg)
{
    struct ovf *o = arg;
    weft_spawn_opts so = {
        .name = o->name, .stack_size = o->stack_size, .compact = o->compact};
    ASSERT(weft_spawn_ex(NULL, overflower, NULL, &so) >= 0);
    return 0;
}

/* Runs fn in a child process with stderr piped back; returns the wait
 * status and fills out (NUL-terminated). */
static int run_in_child(weft_fn fn, struct ovf *o, char *out, size_t cap)
{
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        close(fds[1]);
        alarm(60); /* a hang is a failure too (SIGALRM, checked below) */
        weft_config cfg = {0};
        cfg.workers = o->workers;
        cfg.clock = WEFT_CLOCK_VIRTUAL;
        int r = weft_run(&cfg, fn, o);
        fprintf(stderr, "weft_run returned %d after an overflow\n", r);
        _exit(0);
    }
    close(fds[1]);
    size_t len = 0;
    for (;;) {
        ssize_t n = read(fds[0], out + len, cap - 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
        if (len == cap - 1) {
            char sink[256]; /* keep draining so the child cannot block */
            while (read(fds[0], sink, sizeof sink) > 0)
                ;
            break;
        }
    }
    out[len] = '\0';
    close(fds[0]);
    int status;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    return status;
}

static void expect_overflow_report(weft_fn fn, struct ovf *o)
{
    static char out[1 << 16];
    int status = run_in_child(fn, o, out, sizeof out);
    int abnormal =
        WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) != 0);
    if (!abnormal || strstr(out, "stack overflow") == NULL ||
        strstr(out, o->name) == NULL ||
        (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM))
        T_FAIL("child status %#x (signal %d, exit %d); stderr:\n%s", status,
               WIFSIGNALED(status) ? WTERMSIG(status) : 0,
               WIFEXITED(status) ? WEXITSTATUS(status) : -1, out);
}

TEST(stack_overflow_reported_with_task_name)
{
    struct ovf o = {.workers = 1, .name = "overflower"};
    expect_overflow_report(only_named_root, &o);
}

/* A compact task's stack, given back while it slept (its worker idle)
 * and copied in again, keeps its guard page. */
TEST(stack_overflow_compact_task_reported)
{
    struct ovf o = {.workers = 2, .name = "compact-overflower", .compact = 1};
    expect_overflow_report(only_named_root, &o);
}

TEST(stack_overflow_custom_stack_size_two_workers)
{
    struct ovf o = {
        .workers = 2, .stack_size = 128 * 1024, .name = "overflower-128k"};
    expect_overflow_report(only_named_root, &o);
}

/* ---- stacks are reused ------------------------------------------------- */

/* Touches about 24 KiB of stack, so a fresh stack per task would cost
 * RSS. */
__attribute__((noinline)) static int touch_stack(int depth)
{
    volatile char buf[1024];
    buf[0] = 1;
    buf[sizeof buf - 1] = 1;
    if (depth == 0)
        return buf[0];
    return touch_stack(depth - 1) + buf[sizeof buf - 1];
}

static atomic_long short_ran;

static int short_task(void *arg)
{
    (void)arg;
    ASSERT_EQ(touch_stack(23), 24);
    atomic_fetch_add(&short_ran, 1);
    return 0;
}

static void spawn_join(int n)
{
    for (int i = 0; i < n; i++) {
        weft_scope *s;
        ASSERT_EQ(weft_scope_open(&s, NULL), 0);
        ASSERT_EQ(weft_spawn(s, short_task, NULL), 0);
        ASSERT_EQ(weft_scope_join(s), 0);
        ASSERT_EQ(weft_scope_free(s), 0);
    }
}

static int reuse_root(void *arg)
{
    long *growth = arg;
    spawn_join(200); /* warm up pools */
    long before = max_rss_kib();
    spawn_join(10000);
    *growth = max_rss_kib() - before;
    return 0;
}

TEST(stacks_are_reused)
{
    long growth = -1;
    weft_config cfg = {0};
    cfg.workers = 1;
    ASSERT_EQ(weft_run(&cfg, reuse_root, &growth), 0);
    ASSERT_EQ(atomic_load(&short_ran), 10200);
    long limit = SANITIZED ? 32 * 1024 : 4 * 1024; /* KiB */
    if (CHECK_RSS && (growth < 0 || growth >= limit))
        T_FAIL("peak RSS grew by %ld KiB over 10,000 tasks", growth);
}

TEST(stacks_are_reused_two_workers)
{
    long growth = -1;
    weft_config cfg = {0};
    cfg.workers = 2;
    ASSERT_EQ(weft_run(&cfg, reuse_root, &growth), 0);
    ASSERT_EQ(atomic_load(&short_ran), 10200);
    long limit = SANITIZED ? 32 * 1024 : 4 * 1024;
    if (CHECK_RSS && (growth < 0 || growth >= limit))
        T_FAIL("peak RSS grew by %ld KiB over 10,000 tasks", growth);
}

/* ---- stack tops are spread over the cache's sets ---------------------- */

#define COLOUR_TASKS 64

struct colours {
    weft_chan *hold; /* closed once every task has noted its frame */
    atomic_int noted;
    unsigned offset[COLOUR_TASKS]; /* each task's frame, in its page */
};

struct colour_arg {
    struct colours *c;
    int i;
};

static int colour_task(void *arg)
{
    struct colour_arg *a = arg;
    a->c->offset[a->i] =
        (unsigned)((uintptr_t)__builtin_frame_address(0) % 4096);
    atomic_fetch_add(&a->c->noted, 1);
    int v;
    ASSERT_EQ(weft_chan_recv(a->c->hold, &v), -EPIPE); /* alive till then */
    return 0;
}

static int colours_root(void *arg)
{
    struct colours *c = arg;
    struct colour_arg args[COLOUR_TASKS];
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    for (int i = 0; i < COLOUR_TASKS; i++) {
        args[i] = (struct colour_arg){c, i};
        ASSERT(weft_spawn(s, colour_task, &args[i]) >= 0);
    }
    while (atomic_load(&c->noted) < COLOUR_TASKS)
        ASSERT_EQ(weft_yield(), 0);
    ASSERT_EQ(weft_chan_close(c->hold), 0);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

/* Tasks alive at once, so each on a slot of its own, start their stacks
 * at many offsets in their pages (cache colours), not at one: at one, the
 * level-1 cache, indexed by that offset, would hold the tops of 8 of them
 * at most. Slots laid out one after the other take the 32 colours in
 * turn (all 32 here, on x86-64 and on aarch64); 16 leaves room for slots
 * that come from two chunks. */
TEST(stack_tops_are_spread_over_cache_colours)
{
    struct colours c = {0};
    ASSERT_EQ(weft_chan_new(&c.hold, sizeof(int), 0), 0);
    weft_config cfg = {0};
    cfg.workers = 1;
    ASSERT_EQ(weft_run(&cfg, colours_root, &c), 0);
    ASSERT_EQ(atomic_load(&c.noted), COLOUR_TASKS);
    int distinct = 0;
    for (int i = 0; i < COLOUR_TASKS; i++) {
        int seen = 0;
        for (int j = 0; j < i && !seen; j++)
            seen = c.offset[j] == c.offset[i];
        distinct += !seen;
    }
    if (distinct < 16)
        T_FAIL("64 tasks' frames at %d offsets in their pages", distinct);
    ASSERT_EQ(weft_chan_unref(c.hold), 0);
}

/* ---- stacks are committed lazily -------------------------------------- */

struct lazy {
    long n;
    atomic_long parked;
    long growth;
};

static int lazy_task(void *arg)
{
    struct lazy *l = arg;
    ASSERT_EQ(touch_stack(1), 2); /* ~2 KiB of stack */
    atomic_fetch_add(&l->parked, 1);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    return 0;
}

static int lazy_root(void *arg)
{
    struct lazy *l = arg;
    long before = max_rss_kib();
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    for (long i = 0; i < l->n; i++)
        ASSERT(weft_spawn(s, lazy_task, l) >= 0);
    /* Virtual clock: by 1 ms every task is parked on its sleep. */
    ASSERT_EQ(weft_sleep_for(WEFT_MSEC), 0);
    ASSERT_EQ(atomic_load(&l->parked), l->n);
    l->growth = max_rss_kib() - before;
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

TEST(stacks_are_committed_lazily)
{
    static struct lazy l;
    l.n = T_LIVE(20000);
    weft_config cfg = {0};
    cfg.workers = 1;
    cfg.clock = WEFT_CLOCK_VIRTUAL;
    ASSERT_EQ(weft_run(&cfg, lazy_root, &l), 0);
    /* 64 KiB stacks fully committed would be 64 KiB a task; a lazily
     * committed one that used ~2 KiB costs a page or two plus the task. */
    long per_task = l.growth * 1024 / l.n;
    long limit = SANITIZED ? 64 * 1024 : 24 * 1024; /* bytes a task */
    if (CHECK_RSS && per_task >= limit)
        T_FAIL("%ld bytes of RSS per parked task (%ld tasks)", per_task, l.n);
}

/* ---- small stack sizes ------------------------------------------------ */

static int small_child(void *arg)
{
    (void)arg;
    ASSERT_EQ(weft_sleep_for(WEFT_MSEC), 0);
    return 0;
}

static int small_root(void *arg)
{
    (void)arg;
    weft_scope *s = scope_open();
    for (int i = 0; i < 4; i++)
        spawn(small_child, NULL);
    scope_end(s);
    return 7;
}

/* A configured stack smaller than a page is rounded up to pages; the
 * guard page must not take the page that holds the task itself. */
TEST(config_tiny_stack_size_runs)
{
    size_t sizes[] = {1, 512, 4096};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        weft_config cfg = {0};
        cfg.workers = 1;
        cfg.clock = WEFT_CLOCK_VIRTUAL;
        cfg.stack_size = sizes[i];
        ASSERT_EQ(weft_run(&cfg, small_root, NULL), 7);
    }
}

/* The least stack holds a signal's frame, which the kernel pushes on the
 * running task's stack (no SA_ONSTACK), with the whole register state: on
 * a machine with AVX-512 that frame alone is 3.3 KiB, and a task that
 * asked for a few bytes of stack got 3.7 KiB until it was given a floor. */
static volatile sig_atomic_t usr1_seen;

/* A handler with a frame of its own (a profiler's, say, that walks the
 * stack), below the signal's frame. */
static void on_usr1(int sig)
{
    volatile char own[512];
    for (size_t i = 0; i < sizeof own; i += 64)
        own[i] = (char)sig;
    usr1_seen += own[0] == (char)sig;
}

/* Uses 2 KiB of its stack, of the 4 KiB a task may count on for its own
 * frames, and takes the signal there. */
static __attribute__((noinline)) int raise_usr1(void *arg)
{
    (void)arg;
    volatile char used[2048];
    for (size_t i = 0; i < sizeof used; i += 64)
        used[i] = (char)i;
    ASSERT_EQ(raise(SIGUSR1), 0);
    return 0;
}

static int tiny_signal_root(void *arg)
{
    (void)arg;
    weft_scope *s = scope_open();
    size_t sizes[] = {1, 512, 4096};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        weft_spawn_opts o = {.name = "tiny", .stack_size = sizes[i]};
        ASSERT(weft_spawn_ex(s, raise_usr1, NULL, &o) >= 0);
    }
    scope_end(s);
    return 0;
}

TEST(tiny_stack_takes_a_signal)
{
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1; /* on the running task's stack */
    sigemptyset(&sa.sa_mask);
    ASSERT_EQ(sigaction(SIGUSR1, &sa, &old), 0);
    usr1_seen = 0;
    ASSERT_EQ(t_run_virtual(1, tiny_signal_root, NULL), 0);
    ASSERT_EQ(sigaction(SIGUSR1, &old, NULL), 0);
    ASSERT_EQ((int)usr1_seen, 3);
}

/* ---- valgrind registrations are undone -------------------------------- */

static int sleep_1ms(void *arg)
{
    (void)arg;
    return weft_sleep_for(WEFT_MSEC);
}

static void spawn_sleepers(int n, size_t stack_size)
{
    weft_scope *s = scope_open();
    weft_spawn_opts o = {.stack_size = stack_size};
    for (int i = 0; i < n; i++)
        ASSERT(weft_spawn_ex(s, sleep_1ms, NULL, &o) >= 0);
    scope_end(s);
}

static int registrations_root(void *arg)
{
    (void)arg;
    weft__pool_global *g = &weft__tl_worker->rt->pool;
    /* 1500 at once: slots carved, most of them handed to the shared list
     * when they end. */
    spawn_sleepers(1500, 0);
    long laid = atomic_load(&weft__stacks_registered);
    ASSERT(laid >= 1501);
    /* Custom stacks: registered while they run, not after. */
    spawn_sleepers(5, 100 * 1024);
    ASSERT_EQ(atomic_load(&weft__stacks_registered), laid);
    /* Memory given back (what an idle worker does): those slots go. */
    ASSERT_EQ(g->ncold, 0);
    weft__pool_trim(weft__tl_worker);
    ASSERT(g->ncold > 0);
    ASSERT_EQ(atomic_load(&weft__stacks_registered), laid - (long)g->ncold);
    /* Laid out again from the cold list: registered again, once each. */
    spawn_sleepers(1500, 0);
    ASSERT_EQ(g->ncold, 0);
    ASSERT_EQ(atomic_load(&weft__stacks_registered), laid);
    return 0;
}

/* Every stack registered with valgrind is deregistered before its memory
 * is unmapped or given back, so that nothing is left registered when a
 * runtime ends (valgrind searches that list at every stack switch: what
 * is left behind slows every later runtime of the process). */
TEST(stacks_deregistered_when_unmapped)
{
    ASSERT_EQ(atomic_load(&weft__stacks_registered), 0);
    for (int run = 0; run < 3; run++) {
        weft_config cfg = {0};
        cfg.workers = 1;
        cfg.clock = WEFT_CLOCK_VIRTUAL;
        ASSERT_EQ(weft_run(&cfg, registrations_root, NULL), 0);
        ASSERT_EQ(atomic_load(&weft__stacks_registered), 0);
    }
    ASSERT_EQ(t_run_virtual(2, small_root, NULL), 7);
    ASSERT_EQ(atomic_load(&weft__stacks_registered), 0);
}

/* ---- custom stacks at vm.max_map_count ------------------------------- */

#define PAGE ((size_t)sysconf(_SC_PAGESIZE))
#define CUSTOM_STACK (96 * 1024) /* not the default: a mapping of its own */

/* Mappings that bring the process to the kernel's limit. */
struct fill {
    void **pages; /* one-page mappings, alternately RW and read-only */
    size_t n;
    void *spare; /* two pages of shared memory: split to add one */
};

static long max_map_count(void)
{
    long max = 65530;
    FILE *f = fopen("/proc/sys/vm/max_map_count", "r");
    if (f) {
        if (fscanf(f, "%ld", &max) != 1)
            max = 65530;
        fclose(f);
    }
    return max;
}

/* Leaves the process with as many mappings as vm.max_map_count allows,
 * the lowest of them a page with the flags of a task slot, right above
 * free space: the next slot is mapped there and merges with it, and the
 * one after merges below that one, so freeing the first would split a
 * mapping, which the count forbids. False if the limit is too high to
 * reach quickly (nothing is then left mapped). */
static bool fill_to_limit(struct fill *f)
{
#if defined(WEFT_TSAN)
    /* TSan maps its own metadata for the memory a task touches: at the
     * limit that fails, and TSan ends the process. */
    fprintf(stderr, "TSan cannot run at the map count limit: skipped\n");
    return false;
#elif defined(WEFT_TEST_EMULATED)
    /* qemu-user lays out the guest's mappings itself, and maps for its own
     * translations too: the guest's pages are not the host's mappings, so
     * the limit cannot be aimed at (a spawn fails before it). */
    fprintf(stderr, "the map count limit cannot be reached under "
                    "emulation: skipped\n");
    return false;
#endif
    long max = max_map_count();
    if (max > 300000) {
        fprintf(stderr, "vm.max_map_count is %ld: not filled, skipped\n", max);
        return false;
    }
    size_t cap = (size_t)max + 64;
    f->pages = malloc(cap * sizeof(void *));
    ASSERT(f->pages != NULL);
    f->n = 0;
    f->spare = mmap(NULL, 2 * PAGE, PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ASSERT(f->spare != MAP_FAILED);
    for (;;) {
        int prot = f->n & 1 ? PROT_READ : PROT_READ | PROT_WRITE;
        void *p = mmap(NULL, PAGE, prot,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) {
            ASSERT_EQ(errno, ENOMEM);
            break;
        }
        ASSERT(f->n < cap);
        f->pages[f->n++] = p;
    }
    /* One over the limit now (mmap refuses only past it). */
    ASSERT(f->n >= 3);
    ASSERT_EQ(munmap(f->pages[--f->n], PAGE), 0);
    if (f->n % 2 == 0) { /* the lowest is read-only: one more, and split */
        ASSERT_EQ(munmap(f->pages[--f->n], PAGE), 0);
        ASSERT_EQ(mprotect(f->spare, PAGE, PROT_READ), 0);
    }
    return true;
}

static void unfill(struct fill *f)
{
    for (size_t i = 0; i < f->n; i++)
        ASSERT_EQ(munmap(f->pages[i], PAGE), 0);
    ASSERT_EQ(munmap(f->spare, 2 * PAGE), 0);
    free(f->pages);
    f->n = 0;
}

static bool mapped(const void *addr)
{
    unsigned char vec;
    void *page = (void *)((uintptr_t)addr & ~(uintptr_t)(PAGE - 1));
    if (mincore(page, PAGE, &vec) == 0)
        return true;
    ASSERT_EQ(errno, ENOMEM);
    return false;
}

struct custom {
    int64_t sleep_ns;
    const char *frame; /* the task's frame address */
};

static int custom_task(void *arg)
{
    struct custom *c = arg;
    c->frame = __builtin_frame_address(0);
    return weft_sleep_for(c->sleep_ns);
}

struct limit_case {
    bool respawn; /* spawn C after A was freed */
    bool skipped; /* the limit was out of reach */
    struct custom a, b, c;
};

static void spawn_custom(struct custom *c)
{
    weft_spawn_opts o = {.stack_size = CUSTOM_STACK};
    ASSERT(weft_spawn_ex(NULL, custom_task, c, &o) >= 0);
}

static int limit_root(void *arg)
{
    struct limit_case *lc = arg;
    struct fill f;
    if (!fill_to_limit(&f)) {
        lc->skipped = true;
        return 0;
    }
    weft_scope *s = scope_open();
    lc->a.sleep_ns = WEFT_MSEC;
    lc->b.sleep_ns = 3 * WEFT_MSEC;
    spawn_custom(&lc->a);
    spawn_custom(&lc->b);
    ASSERT_EQ(weft_sleep_for(2 * WEFT_MSEC), 0);
    /* A ended at 1 ms, in the middle of [B][A][filler]: its munmap was
     * refused, so its slot is still mapped. */
    if (!mapped(lc->a.frame)) {
        unfill(&f);
        T_FAIL("A's slot was unmapped: the setup did not reach the limit");
    }
    if (lc->respawn) {
        lc->c.sleep_ns = 0;
        spawn_custom(&lc->c);
    }
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    unfill(&f);
    return 0;
}

static void run_limit_case(struct limit_case *lc)
{
    weft_config cfg = {0};
    cfg.workers = 1;
    cfg.clock = WEFT_CLOCK_VIRTUAL;
    ASSERT_EQ(weft_run(&cfg, limit_root, lc), 0);
}

/* A custom stack freed at the limit keeps its slot for the next custom
 * stack that fits (which then maps nothing), and the slot is unmapped
 * once the runtime is over. */
TEST(custom_stack_stranded_at_map_limit_is_reused)
{
    static struct limit_case lc = {.respawn = true};
    run_limit_case(&lc);
    if (lc.skipped)
        return;
    /* C ran on A's slot: the same stack, the same frame. */
    ASSERT(lc.c.frame == lc.a.frame);
    ASSERT(!mapped(lc.a.frame));
    ASSERT(!mapped(lc.b.frame));
    ASSERT_EQ(atomic_load(&weft__stacks_registered), 0);
}

/* Nothing reuses it: weft_run unmaps it before it returns. */
TEST(custom_stack_stranded_at_map_limit_is_unmapped_at_end)
{
    static struct limit_case lc = {.respawn = false};
    run_limit_case(&lc);
    if (lc.skipped)
        return;
    ASSERT(!mapped(lc.a.frame));
    ASSERT(!mapped(lc.b.frame));
    /* And the process can map as before. */
    void *p = mmap(NULL, 16 * PAGE, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT(p != MAP_FAILED);
    ASSERT_EQ(munmap(p, 16 * PAGE), 0);
}
