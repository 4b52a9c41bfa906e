/* SPDX-License-Identifier: MIT */
/*
 * Task slots: a stack and, at its top, the task struct.
 *
 * Memory is mapped in chunks of many slots (MAP_NORESERVE, committed page by
 * page as it is touched) and never on the steady-state spawn path: a worker
 * takes slots from its own LIFO free list (warm: the pages are resident and
 * likely cached), then from the runtime's shared list, then carves a fresh
 * slot from its current chunk, and only when that is used up maps a new
 * chunk. A finished task's slot goes back on the free list of the worker it
 * ran on; a worker with too many hands the surplus to the shared list, and
 * an idle worker gives the memory of slots beyond a warm reserve back to
 * the kernel (madvise), keeping the address range for reuse.
 *
 * Overflow: while the kernel's mapping budget allows (vm.max_map_count;
 * every guard page splits a mapping in two), each slot gets a PROT_NONE
 * guard page below its stack and a SIGSEGV handler on an alternate stack
 * reports the task by name. Past the budget (a million tasks), slots have
 * no guard. Every slot's last word (on the page the task struct already
 * occupies) holds a canary; an overflowing stack runs into the top of the
 * slot below it first, so at every switch away from a task without a guard
 * the canary of the slot below is checked (a zero there means that slot's
 * memory was given back: nothing in use). A slot at the start of a chunk
 * has no slot below; it keeps a canary at its own stack's bottom instead.
 * Either way the process aborts with the task's name and spawn site. A
 * canary is a best effort: a frame that jumps over it without writing it
 * escapes; guard pages do not have that hole.
 *
 * Valgrind: a slot's stack is registered (VALGRIND_STACK_REGISTER) when
 * the slot is laid out and deregistered when it is forgotten, before its
 * memory is unmapped or given back (slot_forget, which also ends its TSan
 * fiber). Valgrind looks stacks up in a list on every large change of the
 * stack pointer, so registrations left behind by ended runtimes would make
 * every later one slower.
 *
 * A task with a stack size of its own gets a mapping of its own, unmapped
 * when it ends. At vm.max_map_count, that munmap can fail (ENOMEM): the
 * kernel merges adjacent anonymous mappings of the same kind, and freeing
 * a slot in the middle of such a merged mapping needs a split, which the
 * count does not allow. Such a slot is not lost: its stack memory is given
 * back (madvise, which splits nothing), and its task struct, still in its
 * top page, links it into a process-wide list of stranded slots. The next
 * custom stack that fits re-lays the smallest one instead of mapping
 * anew, and when a runtime ends (its own mappings gone, so the count is
 * lower) every stranded slot is unmapped again; one that still cannot be
 * waits for the next custom stack or the next runtime's end.
 *
 * The watchdog's thread reads the running task's name, spawn site and id
 * from its struct (stats.c). A slot is released here (put on a free list,
 * laid out again, unmapped, given back) only after its task has passed
 * weft__watch_leave, which waits for such a read to end and after which
 * none starts: nothing here needs to wait for the watchdog.
 */
#include "sched/scheduler.h"
#include "util/fault.h"
#include "util/sig.h"
#include "util/tsan.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(WEFT_HAVE_VALGRIND_H)
#include <valgrind/valgrind.h>
#endif

#define SLOTS_PER_CHUNK 64
#define LOCAL_HIGH 256  /* a worker keeps at most this many free slots */
#define LOCAL_BATCH 64  /* moved to/from the shared list at a time */
#define GLOBAL_WARM 512 /* shared slots kept resident when trimming */
#define CANARY 0x77656674C0FFEE11ull

#if defined(WEFT_TSAN)
#include <sanitizer/tsan_interface.h>
#endif

atomic_long weft__stacks_registered;
atomic_long weft__stacks_released;

/* Called once per laying out of a slot, when its task struct is in
 * place. */
static void stack_register(weft_task *t)
{
#if defined(WEFT_HAVE_VALGRIND_H)
    t->vg_stack = VALGRIND_STACK_REGISTER(t->stack_lo, (char *)t);
#else
    WEFT_UNUSED(t);
#endif
    add_rlx(&weft__stacks_registered, 1);
}

/* Ends what a slot's laying out started, before its memory is unmapped or
 * given back: its valgrind registration, and its TSan fiber (which lives
 * as long as the slot's memory). Once per slot_init. */
static void slot_forget(weft_task *t)
{
#if defined(WEFT_TSAN)
    if (t->tsan_fiber)
        __tsan_destroy_fiber(t->tsan_fiber);
    t->tsan_fiber = NULL;
#endif
#if defined(WEFT_HAVE_VALGRIND_H)
    VALGRIND_STACK_DEREGISTER(t->vg_stack);
#endif
    add_rlx(&weft__stacks_registered, -1);
}

static size_t page_size(void)
{
    static size_t ps;
    if (!ps)
        ps = (size_t)sysconf(_SC_PAGESIZE);
    return ps;
}

static size_t round_up(size_t n, size_t a)
{
    return (n + a - 1) / a * a;
}

/* Room reserved at the top of a slot: the task struct, then the canary in
 * the slot's last word. */
static size_t task_area(void)
{
    return round_up(sizeof(weft_task) + sizeof(uint64_t), WEFT_CACHELINE);
}

#define OWN_FRAMES (WEFT__SAN_STACK_SCALE * 4096)

/* The least stack a task gets, whatever it asked for: OWN_FRAMES for its
 * own frames, plus what the system may push on it unasked. A signal's frame
 * holds the processor's whole register state (3.3 KiB with AVX-512,
 * nearly all of a one-page stack), and so does the dynamic linker's when
 * it resolves a function at its first call. */
static size_t stack_floor(void)
{
    static atomic_size_t floor_bytes; /* 0: not computed yet */
    size_t f = ld_rlx(&floor_bytes);
    if (f == 0) {
        long sig = -1;
#if defined(_SC_MINSIGSTKSZ)
        sig = sysconf(_SC_MINSIGSTKSZ); /* the kernel's, for this CPU */
#endif
        if (sig <= 0)
            sig = MINSIGSTKSZ;
        f = OWN_FRAMES + (size_t)sig;
        st_rlx(&floor_bytes, f);
    }
    return f;
}

/* A slot's task struct, and so the top of its stack, sits a colour's
 * lines below the top of the slot (slot_colour): SLOT_COLOURS of them,
 * which the slot's size allows for. Without colours every task struct
 * and stack top sits at the same offset in its page, so in the same set
 * of the level-1 data cache (indexed by the offset in the page: 64 sets
 * of 8 lines here), which then holds the hot lines of 8 tasks at most:
 * tasks that take turns by the dozen evict each other's. With colours a
 * ring of 10 actors takes 0.84x the time a hop, one of 30 0.92x (one of
 * 1,000, whose lines fit no level-1 cache anyway, the same), and
 * bench/spawn and skynet, whose tasks take slots just freed, 0.87-0.88x
 * and 0.85-0.95x. jemalloc offsets its large allocations within their
 * page for the same reason. The colour costs address space only: the
 * struct stays on the slot's last page. */
#define SLOT_COLOURS 32

/* A slot: the stack (at least stack_floor), rounded up with the task area
 * and the colours to pages, plus a page below for the guard. The guard
 * must not come out of the stack: with a stack under a page it took the
 * page the task struct is on. */
static size_t slot_bytes(size_t stack_size)
{
    if (stack_size < stack_floor())
        stack_size = stack_floor();
    return round_up(stack_size + task_area() +
                        (SLOT_COLOURS - 1) * WEFT_CACHELINE,
                    page_size()) +
           page_size();
}

/* The colour of the slot [lo, lo + size), in lines: its number in the
 * address space, counted in slots of its size. Slots laid out one after
 * the other in a chunk take the colours in turn, all 32 before any comes
 * again. (A hash of the page number did worse: Fibonacci's, with the
 * default slot of 18 pages, gave 8 colours that came round every 8 slots,
 * since 18 times the golden ratio is within 0.0004 of a whole number and
 * an eighth.) */
static size_t slot_colour(const char *lo, size_t size)
{
    return (size_t)((uintptr_t)lo / size % SLOT_COLOURS);
}

static long guard_budget(void)
{
    long max = 65530;
    FILE *f = fopen("/proc/sys/vm/max_map_count", "r");
    if (f) {
        if (fscanf(f, "%ld", &max) != 1)
            max = 65530;
        fclose(f);
    }
    /* Each guarded slot costs two mappings; leave half the budget to the
     * program (malloc arenas, libraries, its own mmaps). */
    long n = max / 4;
    return n > 0 ? n : 0;
}

int weft__pool_init(weft__pool_global *g, size_t stack_size)
{
    memset(g, 0, sizeof(*g));
    pthread_mutex_init(&g->mu, NULL);
    atomic_init(&g->guards_left, guard_budget());
    g->slot_size = slot_bytes(stack_size);
    return 0;
}

static int remember_chunk(weft__pool_global *g, void *p, size_t len)
{
    /* Chunk records are (address, length) pairs. */
    if (g->nchunks + 2 > g->capchunks) {
        size_t cap = g->capchunks ? g->capchunks * 2 : 64;
        void **n = weft__realloc(g->chunks, cap * sizeof(*n));
        if (!n)
            return -ENOMEM;
        g->chunks = n;
        g->capchunks = cap;
    }
    g->chunks[g->nchunks++] = p;
    g->chunks[g->nchunks++] = (void *)len;
    return 0;
}

/* ---- custom slots that could not be unmapped (see the top) ---- */

static pthread_mutex_t stranded_mu = PTHREAD_MUTEX_INITIALIZER;
static weft_task *stranded; /* forgotten slots, linked through next */

/* Keeps a custom slot whose munmap failed, its stack memory given back. */
static void strand(weft_task *t)
{
    char *lo = (t->flags & TASK_GUARDED) ? t->stack_lo : t->slot_lo;
    char *top = (char *)((uintptr_t)t & ~(uintptr_t)(page_size() - 1));
    if (top > lo) /* the task struct's page stays: it is the record */
        madvise(lo, (size_t)(top - lo), MADV_DONTNEED);
    pthread_mutex_lock(&stranded_mu);
    t->next = stranded;
    stranded = t;
    pthread_mutex_unlock(&stranded_mu);
}

/* Takes the smallest stranded slot of at least len bytes, or NULL. */
static weft_task *take_stranded(size_t len)
{
    pthread_mutex_lock(&stranded_mu);
    weft_task **best = NULL;
    for (weft_task **p = &stranded; *p; p = &(*p)->next)
        if ((*p)->slot_size >= len &&
            (!best || (*p)->slot_size < (*best)->slot_size))
            best = p;
    weft_task *t = best ? *best : NULL;
    if (t)
        *best = t->next;
    pthread_mutex_unlock(&stranded_mu);
    return t;
}

/* Unmaps every stranded slot that can be now. */
static void unmap_stranded(void)
{
    pthread_mutex_lock(&stranded_mu);
    for (weft_task **p = &stranded; *p;) {
        weft_task *t = *p, *next = t->next; /* t is in the slot */
        if (munmap(t->slot_lo, t->slot_size) == 0)
            *p = next;
        else
            p = &t->next;
    }
    pthread_mutex_unlock(&stranded_mu);
}

void weft__pool_fini_local(weft_worker *w)
{
    for (weft_task *t = w->pool.free; t; t = t->next)
        slot_forget(t);
    w->pool.free = NULL;
    w->pool.nfree = 0;
}

void weft__pool_fini(weft__pool_global *g)
{
    for (weft_task *t = g->free; t; t = t->next)
        slot_forget(t);
    for (size_t i = 0; i < g->nchunks; i += 2)
        munmap(g->chunks[i], (size_t)g->chunks[i + 1]);
    unmap_stranded(); /* after the chunks: their mappings count too */
    free(g->chunks);
    free(g->cold);
    pthread_mutex_destroy(&g->mu);
    memset(g, 0, sizeof(*g));
}

/* Lays a task struct out at the top of the slot [lo, lo + size), its
 * colour's lines below the top. below: another slot of ours ends at lo. */
static weft_task *slot_init(char *lo, size_t size, bool guarded, bool custom,
                            bool below)
{
    weft_task *t = (weft_task *)(lo + size - task_area() -
                                 slot_colour(lo, size) * WEFT_CACHELINE);
    memset(t, 0, sizeof(*t));
    t->slot_lo = lo;
    t->slot_size = size;
    t->stack_lo = guarded ? lo + page_size() : lo;
    t->stack_hi = (char *)t;
    t->flags = (guarded ? TASK_GUARDED : 0) | (custom ? TASK_CUSTOM : 0);
    *(uint64_t *)(lo + size - sizeof(uint64_t)) = CANARY;
    if (!guarded) {
        t->flags |= below ? TASK_CHECK_BELOW : TASK_CHECK_OWN;
        if (!below)
            *(uint64_t *)t->stack_lo = CANARY;
    }
    stack_register(t);
    return t;
}

/* Takes a guard page for a slot if the budget allows. */
static bool take_guard(weft__pool_global *g, char *lo)
{
    if (atomic_fetch_sub(&g->guards_left, 1) <= 0) {
        atomic_fetch_add(&g->guards_left, 1);
        return false;
    }
    if (mprotect(lo, page_size(), PROT_NONE) != 0) {
        atomic_fetch_add(&g->guards_left, 1);
        return false;
    }
    return true;
}

static void *map_region(size_t len)
{
    void *p = weft__fault_fails(WEFT_FAULT_STACK)
                  ? MAP_FAILED
                  : mmap(NULL, len, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static int new_chunk(weft_worker *w)
{
    weft__pool_global *g = &w->rt->pool;
    size_t len = g->slot_size * SLOTS_PER_CHUNK;
    char *p = map_region(len);
    if (!p)
        return -ENOMEM;
    pthread_mutex_lock(&g->mu);
    int rc = remember_chunk(g, p, len);
    pthread_mutex_unlock(&g->mu);
    if (rc) {
        munmap(p, len);
        return rc;
    }
    w->pool.carve = w->pool.carve_start = p;
    w->pool.carve_end = p + len;
    return 0;
}

/* A slot from the worker's own list, or NULL if it is empty. */
static inline __attribute__((always_inline)) weft_task *
pool_take(weft_worker *w)
{
    weft_task *t = w->pool.free;
    if (t != NULL) {
        w->pool.free = t->next;
        w->pool.nfree--;
    }
    return t;
}

static weft_task *take_shared(weft_worker *w)
{
    weft__pool_global *g = &w->rt->pool;
    weft_task *t = NULL;
    pthread_mutex_lock(&g->mu);
    for (int i = 0; i < LOCAL_BATCH && g->free; i++) {
        weft_task *x = g->free;
        g->free = x->next;
        g->nfree--;
        x->next = w->pool.free;
        w->pool.free = x;
        w->pool.nfree++;
    }
    if (!w->pool.free && g->ncold) {
        /* Memory given back earlier: re-lay the slot (first touch again). */
        uintptr_t rec = (uintptr_t)g->cold[--g->ncold];
        char *lo = (char *)(rec & ~(uintptr_t)3);
        t = slot_init(lo, g->slot_size, rec & 1u, false, rec & 2u);
    }
    pthread_mutex_unlock(&g->mu);
    return t ? t : pool_take(w);
}

static weft_task *alloc_custom(weft_runtime *rt, size_t stack_size)
{
    size_t len = slot_bytes(stack_size);
    weft_task *old = take_stranded(len);
    if (old) {
        /* Its guard page, if it has one, is still there. */
        bool guarded = old->flags & TASK_GUARDED;
        if (guarded)
            atomic_fetch_sub(&rt->pool.guards_left, 1);
        return slot_init(old->slot_lo, old->slot_size, guarded, true, false);
    }
    char *p = map_region(len);
    if (!p)
        return NULL;
    bool guarded = take_guard(&rt->pool, p);
    return slot_init(p, len, guarded, true, false);
}

/* ---- compact tasks ----
 *
 * A compact task (task.h, weft__compact) borrows a slot for its stack and
 * keeps its struct on the heap, so that nothing of it needs the slot's
 * pages while it is parked: its worker copies the used part of its stack
 * out (weft__stack_release, on the stack of the task that runs next,
 * right after the switch away) and gives every page of the slot back; the
 * switch back to it copies it in again (weft__stack_restore, before the
 * jump), at the same addresses, so pointers into the stack stay right.
 * The slot keeps its guard page and its canaries (written again on
 * restore), and the slot's own struct, zeroed by the release, is laid out
 * again from the task's copy of its fields when the slot goes back to the
 * pool. Only the owner touches any of it: a compact task never moves. */

#define SLOT_FLAGS                                                             \
    (TASK_GUARDED | TASK_CUSTOM | TASK_CHECK_BELOW | TASK_CHECK_OWN)

weft_task *weft__task_alloc_compact(weft_worker *w, size_t stack_size)
{
#if defined(WEFT_UCONTEXT)
    /* No saved stack pointer to copy from: a plain task. */
    return weft__task_alloc(w, stack_size);
#else
    weft_task *t = weft__calloc(1, WEFT__COMPACT_HEAD + sizeof(weft__compact));
    if (!t)
        return NULL;
    weft_task *c = weft__task_alloc(w, stack_size);
    if (!c) {
        free(t);
        return NULL;
    }
    t->slot_lo = c->slot_lo;
    t->slot_size = c->slot_size;
    t->stack_lo = c->stack_lo;
    t->stack_hi = (char *)c;
    t->flags = (c->flags & SLOT_FLAGS) | TASK_COMPACT;
    t->vg_stack = c->vg_stack;
#if defined(WEFT_TSAN)
    t->tsan_fiber = c->tsan_fiber; /* the slot's, lent with it */
#endif
    return t;
#endif
}

/* Gives a finished (or never started) compact task's slot its struct back,
 * frees the task, and returns the slot's struct, to be freed as a slot. */
static weft_task *compact_free(weft_task *t)
{
    weft__compact *cp = weft__compact_of(t);
    weft_task *c = (weft_task *)(void *)t->stack_hi;
    WEFT_ASSERT_MSG(!(t->flags & (TASK_RELEASED | TASK_PENDING)),
                    "a compact task freed with its stack given back");
    /* (c's own fields are zero if the stack was ever given back) */
    WEFT_ASSERT((char *)c > t->stack_lo &&
                (char *)c < t->slot_lo + t->slot_size);
    /* Written again as the slot's laying out left them (slot_init), the
     * fiber too. */
    c->slot_lo = t->slot_lo;
    c->slot_size = t->slot_size;
    c->stack_lo = t->stack_lo;
    c->stack_hi = (char *)c;
    c->flags = t->flags & SLOT_FLAGS;
    c->vg_stack = t->vg_stack;
#if defined(WEFT_TSAN)
    c->tsan_fiber = t->tsan_fiber;
#endif
    free(cp->img);
    free(t);
    return c;
}

/* A walk of a parked task's stack (observe/where.c: the dump, the
 * deadlock report) may read a compact task's image from another thread.
 * The task itself stays allocated meanwhile (the walker holds its home
 * scope's lock, which its exit needs before compact_free), but its worker
 * replaces the image by a larger one when the task parks deeper: that
 * move holds image_mu, and so does the walk, from its look at the image
 * to its last read. What the walk reads may be stale (the task ran and
 * parked again meanwhile); it checks every address, as for any stack. */
static pthread_mutex_t image_mu = PTHREAD_MUTEX_INITIALIZER;

void weft__image_lock(void)
{
    pthread_mutex_lock(&image_mu);
}

void weft__image_unlock(void)
{
    pthread_mutex_unlock(&image_mu);
}

#if !defined(WEFT_UCONTEXT) /* (ucontext: compact tasks are plain ones) */
/* The stack copies: plain word loops, which the sanitizers leave alone (a
 * parked stack holds ASan's poisoned redzones of its frames, which the
 * image carries out and back unchanged). */
#if defined(WEFT_ASAN) && defined(__clang__)
#define NO_SAN_COPY __attribute__((no_sanitize("address"), noinline))
#elif defined(WEFT_ASAN)
#define NO_SAN_COPY __attribute__((no_sanitize_address, noinline))
#elif defined(WEFT_TSAN) && defined(__clang__)
#define NO_SAN_COPY __attribute__((no_sanitize("thread"), noinline))
#elif defined(WEFT_TSAN)
#define NO_SAN_COPY __attribute__((no_sanitize_thread, noinline))
#else
#define NO_SAN_COPY
#endif

static NO_SAN_COPY void stack_copy(void *to, const void *from, size_t len)
{
#if defined(WEFT_ASAN) || defined(WEFT_TSAN)
    volatile uint64_t *d = to;
    const volatile uint64_t *s = from;
    for (size_t i = 0; i < len / 8; i++)
        d[i] = s[i];
#else
    memcpy(to, from, len);
#endif
}

/* The parts of a compact task's stack that its image holds: [sp, top)
 * without the hole, as [sp, a) and [b, top). */
static void image_parts(weft_task *t, char **a, char **b)
{
    weft__compact *cp = weft__compact_of(t);
    char *sp = t->ctx.sp;
    *a = *b = sp;
    if (cp->hole) {
        char *h = t->stack_hi - cp->hole;
        WEFT_ASSERT_MSG(h >= sp && h + cp->hole_len <= t->stack_hi &&
                            (uintptr_t)h % 8 == 0 && cp->hole_len % 8 == 0,
                        "a compact task's hole off its used stack");
        *a = h;
        *b = h + cp->hole_len;
    }
}
#endif

static void stack_release(weft_task *t)
{
#if defined(WEFT_UCONTEXT)
    WEFT_UNUSED(t);
#else
    weft__compact *cp = weft__compact_of(t);
    char *sp = t->ctx.sp, *a, *b;
    WEFT_ASSERT_MSG((t->flags & (TASK_RELEASED | TASK_MAY_RELEASE |
                                 TASK_PENDING)) == TASK_MAY_RELEASE,
                    "a stack given back twice, or in a wait that keeps it");
    WEFT_ASSERT_MSG(sp >= t->stack_lo && sp < t->stack_hi &&
                        (uintptr_t)sp % 8 == 0,
                    "a compact task's saved stack pointer off its stack");
    image_parts(t, &a, &b);
    size_t lo_len = (size_t)(a - sp), hi_len = (size_t)(t->stack_hi - b);
    size_t len = lo_len + hi_len;
    if (len > cp->cap) {
        size_t cap = (len + 15) & ~(size_t)15;
        /* The old image may be under a walk's reads (weft__image_lock). */
        pthread_mutex_lock(&image_mu);
        char *img = weft__realloc(cp->img, cap);
        if (img) {
            cp->img = img;
            cp->cap = (uint32_t)cap;
        }
        pthread_mutex_unlock(&image_mu);
        if (!img)
            return; /* no memory: the stack stays */
    }
    stack_copy(cp->img, sp, lo_len);
    stack_copy(cp->img + lo_len, b, hi_len);
    cp->len = (uint32_t)len;
    /* Every page of the slot above the guard: the deepest the task ever
     * went may be far below sp; untouched pages cost madvise little. */
    madvise(t->stack_lo, (size_t)(t->slot_lo + t->slot_size - t->stack_lo),
            MADV_DONTNEED);
    t->flags |= TASK_RELEASED;
    add_rlx(&weft__stacks_released, 1);
#endif
}

static void stack_restore(weft_task *t)
{
#if defined(WEFT_UCONTEXT)
    WEFT_UNUSED(t);
#else
    weft__compact *cp = weft__compact_of(t);
    char *sp = t->ctx.sp, *a, *b;
    WEFT_ASSERT(t->flags & TASK_RELEASED);
    image_parts(t, &a, &b);
    size_t lo_len = (size_t)(a - sp), hi_len = (size_t)(t->stack_hi - b);
    WEFT_ASSERT_MSG(lo_len + hi_len == cp->len,
                    "a compact task's image does not fit its stack");
    stack_copy(sp, cp->img, lo_len);
    stack_copy(b, cp->img + lo_len, hi_len);
    *(uint64_t *)(t->slot_lo + t->slot_size - sizeof(uint64_t)) = CANARY;
    if (t->flags & TASK_CHECK_OWN)
        *(uint64_t *)t->stack_lo = CANARY;
    t->flags &= ~(unsigned)TASK_RELEASED;
#endif
}

/* The ring of parks whose stacks are not given back yet: a compact task
 * that parks and runs again soon (a busy one) pays no copy and no
 * madvise; one still parked WEFT__PEND parks later, or when its worker
 * goes idle, has its stack given back. */
void weft__stack_park(weft_worker *w, weft_task *t)
{
    WEFT_ASSERT(w == weft__tl_worker && t->worker == w);
    WEFT_ASSERT((t->flags & (TASK_COMPACT | TASK_MAY_RELEASE | TASK_PENDING |
                             TASK_RELEASED)) ==
                (TASK_COMPACT | TASK_MAY_RELEASE));
    if (WEFT_UNLIKELY(!w->pend)) {
        w->pend = weft__calloc(WEFT__PEND, sizeof(*w->pend));
        if (!w->pend) {
            stack_release(t); /* no ring: given back at once */
            return;
        }
    }
    weft_task *old = w->pend[w->pend_at];
    if (old) {
        WEFT_ASSERT(old->flags & TASK_PENDING);
        old->flags &= ~(unsigned)TASK_PENDING;
        stack_release(old);
        w->pend_live--;
    }
    w->pend[w->pend_at] = t;
    weft__compact_of(t)->pend = (uint16_t)w->pend_at;
    t->flags |= TASK_PENDING;
    w->pend_live++;
    w->pend_at = (w->pend_at + 1) % WEFT__PEND;
}

void weft__stack_resume(weft_worker *w, weft_task *t)
{
    WEFT_ASSERT(w == weft__tl_worker && t->worker == w);
    if (t->flags & TASK_PENDING) {
        weft__compact *cp = weft__compact_of(t);
        WEFT_ASSERT(!(t->flags & TASK_RELEASED) && w->pend[cp->pend] == t);
        w->pend[cp->pend] = NULL;
        w->pend_live--;
        t->flags &= ~(unsigned)TASK_PENDING;
        return; /* its stack is as it left it */
    }
    stack_restore(t);
}

void weft__stack_idle(weft_worker *w)
{
    for (unsigned i = 0; i < WEFT__PEND && w->pend_live; i++) {
        weft_task *t = w->pend[i];
        if (!t)
            continue;
        w->pend[i] = NULL;
        w->pend_live--;
        t->flags &= ~(unsigned)TASK_PENDING;
        stack_release(t);
    }
    WEFT_ASSERT(w->pend_live == 0);
}

/* weft__task_alloc past its usual case: a stack size asked, or no slot
 * in the worker's own list. */
static __attribute__((noinline)) weft_task *task_alloc_more(weft_worker *w,
                                                            size_t stack_size)
{
    weft__pool_global *g = &w->rt->pool;
    if (stack_size && slot_bytes(stack_size) != g->slot_size)
        return alloc_custom(w->rt, stack_size);
    weft_task *t = pool_take(w);
    if (t != NULL || (t = take_shared(w)) != NULL)
        return t;
    if (w->pool.carve == w->pool.carve_end && new_chunk(w) != 0)
        return NULL;
    char *lo = w->pool.carve;
    bool below = w->pool.carve != w->pool.carve_start;
    w->pool.carve += g->slot_size;
    bool guarded = take_guard(g, lo);
    return slot_init(lo, g->slot_size, guarded, false, below);
}

/* The usual case, a slot from the worker's own list, calls nothing (the
 * rest is a tail call), so it saves no register. */
weft_task *weft__task_alloc(weft_worker *w, size_t stack_size)
{
    weft_task *t;
    if (WEFT_LIKELY(stack_size == 0) && WEFT_LIKELY((t = pool_take(w)) != NULL))
        return t;
    return task_alloc_more(w, stack_size);
}

static void release_custom(weft_runtime *rt, weft_task *t)
{
    slot_forget(t);
    if (t->flags & TASK_GUARDED)
        atomic_fetch_add(&rt->pool.guards_left, 1);
    if (munmap(t->slot_lo, t->slot_size) != 0)
        strand(t); /* at the map count limit: see the top */
}

/* The worker keeps too many slots: hands a batch to the shared list for
 * other workers. */
static __attribute__((noinline)) void pool_spill(weft_worker *w)
{
    weft__pool_global *g = &w->rt->pool;
    pthread_mutex_lock(&g->mu);
    for (int i = 0; i < LOCAL_BATCH; i++) {
        weft_task *x = pool_take(w);
        x->next = g->free;
        g->free = x;
        g->nfree++;
    }
    pthread_mutex_unlock(&g->mu);
}

/* t's slot goes back to the worker's own list (a batch of them on to the
 * shared one when it holds too many). */
static inline __attribute__((always_inline)) void pool_put(weft_worker *w,
                                                           weft_task *t)
{
    t->next = w->pool.free;
    w->pool.free = t;
    if (WEFT_UNLIKELY(++w->pool.nfree > LOCAL_HIGH))
        pool_spill(w);
}

/* weft__task_free of a compact task, or of one with a slot of its own. */
static __attribute__((noinline)) void task_free_unusual(weft_worker *w,
                                                        weft_task *t)
{
    if (t->flags & TASK_COMPACT)
        t = compact_free(t);
    if (t->flags & TASK_CUSTOM)
        release_custom(w->rt, t);
    else
        pool_put(w, t);
}

/* Every call here is a tail call: the usual case saves no register. */
void weft__task_free(weft_worker *w, weft_task *t)
{
    if (WEFT_UNLIKELY(t->flags & (TASK_COMPACT | TASK_CUSTOM)))
        task_free_unusual(w, t);
    else
        pool_put(w, t);
}

static int cold_push(weft__pool_global *g, weft_task *t)
{
    if (g->ncold == g->capcold) {
        size_t cap = g->capcold ? g->capcold * 2 : 1024;
        void **n = weft__realloc(g->cold, cap * sizeof(*n));
        if (!n)
            return -ENOMEM;
        g->cold = n;
        g->capcold = cap;
    }
    uintptr_t rec = (uintptr_t)t->slot_lo;
    rec |= (t->flags & TASK_GUARDED) ? 1u : 0u;
    rec |= (t->flags & TASK_CHECK_BELOW) ? 2u : 0u;
    g->cold[g->ncold++] = (void *)rec;
    return 0;
}

void weft__pool_trim(weft_worker *w)
{
    weft__pool_global *g = &w->rt->pool;
    pthread_mutex_lock(&g->mu); /* idle path only: the lock is cheap here */
    while (g->nfree > GLOBAL_WARM) {
        weft_task *t = g->free;
        if (cold_push(g, t) != 0)
            break;
        g->free = t->next;
        g->nfree--;
        slot_forget(t);
        char *lo = (t->flags & TASK_GUARDED) ? t->stack_lo : t->slot_lo;
        madvise(lo, (size_t)(t->slot_lo + t->slot_size - lo), MADV_DONTNEED);
    }
    pthread_mutex_unlock(&g->mu);
}

/* ---- overflow ----
 *
 * The report and the fault handler are async-signal-safe. Under TSan they
 * are also left uninstrumented (WEFT_NO_TSAN) and make the system calls
 * themselves instead of calling write, signal, raise or abort, which TSan
 * intercepts: the handler also runs for a fault inside TSan's runtime
 * (TSan passes synchronous signals on at once), which may hold its own
 * locks then, and an instrumented access or an intercepted call taking
 * them again would wait forever instead of letting the process die. */

#if defined(WEFT_TSAN) && (defined(__x86_64__) || defined(__aarch64__))
#define RAW_SIGNALS 1
#include <sys/syscall.h>
#else
#define RAW_SIGNALS 0
#endif

/* Gives sig its default action again, bypassing interceptors. */
static WEFT_NO_TSAN void sig_default(int sig)
{
#if RAW_SIGNALS
    /* The kernel's struct sigaction, all zero: SIG_DFL, no flags, no mask
     * (whatever its layout). Stored one by one: no memset call. */
    unsigned long act[4];
    for (int i = 0; i < 4; i++)
        ((volatile unsigned long *)act)[i] = 0;
    syscall(SYS_rt_sigaction, sig, act, NULL, sizeof(act[0]));
#else
    signal(sig, SIG_DFL);
#endif
}

/* Ends the process with sig, its default action: abort() for SIGABRT. */
static WEFT_NO_TSAN void sig_die(int sig)
{
    sig_default(sig);
#if RAW_SIGNALS
    /* Signals are blocked in a handler TSan called: unblock sig first. */
    unsigned long set = 1ul << (sig - 1);
    syscall(SYS_rt_sigprocmask, SIG_UNBLOCK, &set, NULL, sizeof(set));
    syscall(SYS_tgkill, syscall(SYS_getpid), syscall(SYS_gettid), sig);
#else
    if (sig == SIGABRT)
        abort();
    raise(sig);
#endif
}

WEFT_NO_TSAN void weft__stack_report_overflow(const weft_task *t)
{
    weft__sig_write("weft: stack overflow in task '");
    weft__sig_write(t->name ? t->name : "(unnamed)");
    weft__sig_write("' spawned at ");
    weft__sig_write(t->file ? t->file : "?");
    weft__sig_write(":");
    weft__sig_write_num((unsigned long)t->line);
    weft__sig_write(" (stack ");
    weft__sig_write_num((unsigned long)(t->stack_hi - t->stack_lo));
    weft__sig_write(" bytes): raise the stack size (weft_config.stack_size or "
                    "weft_spawn_opts.stack_size)\n");
}

void weft__stack_check_slow(weft_task *t)
{
    uint64_t v = CANARY;
    if (t->flags & TASK_CHECK_BELOW) {
        v = *(const uint64_t *)(t->slot_lo - sizeof(uint64_t));
        if (v == 0) /* the slot below is cold: nothing in use was hit */
            v = CANARY;
    } else if (t->flags & TASK_CHECK_OWN) {
        v = *(const uint64_t *)t->stack_lo;
    }
    if (WEFT_UNLIKELY(v != CANARY ||
                      (char *)__builtin_frame_address(0) < t->stack_lo)) {
        weft__stack_report_overflow(t);
        abort();
    }
}

static pthread_mutex_t handler_mu = PTHREAD_MUTEX_INITIALIZER;
static int handler_users;
static struct sigaction old_segv, old_bus;

static WEFT_NO_TSAN void on_fault(int sig, siginfo_t *si, void *uc)
{
    weft_worker *w = weft__tl_worker;
    weft_task *t = w ? w->cur : NULL;
    char *addr = si->si_addr;
    if (t && (t->flags & TASK_GUARDED) && addr >= t->slot_lo &&
        addr < t->stack_lo + 64) {
        weft__stack_report_overflow(t);
        sig_die(SIGABRT);
        return;
    }
    /* Not ours: hand it to whoever handled it before us. */
    struct sigaction *old = sig == SIGSEGV ? &old_segv : &old_bus;
    if (old->sa_flags & SA_SIGINFO) {
        if (old->sa_sigaction) {
            old->sa_sigaction(sig, si, uc);
            return;
        }
    } else if (old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN) {
        old->sa_handler(sig);
        return;
    }
    /* Nobody: the default action. A fault happens again when the access
     * is executed again (the core shows it); a signal someone sent is
     * sent again. */
    if (si->si_code > 0)
        sig_default(sig);
    else
        sig_die(sig);
}

int weft__overflow_handler_install(void)
{
    pthread_mutex_lock(&handler_mu);
    if (handler_users++ == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof(sa));
        sa.sa_sigaction = on_fault;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGSEGV, &sa, &old_segv);
        sigaction(SIGBUS, &sa, &old_bus);
    }
    pthread_mutex_unlock(&handler_mu);
    return 0;
}

void weft__overflow_handler_remove(void)
{
    pthread_mutex_lock(&handler_mu);
    if (--handler_users == 0) {
        sigaction(SIGSEGV, &old_segv, NULL);
        sigaction(SIGBUS, &old_bus, NULL);
    }
    pthread_mutex_unlock(&handler_mu);
}
