/* SPDX-License-Identifier: MIT */
/*
 * Where a parked task waits: its stack, walked from its saved context, and
 * the line that blocked (the caller of the public weft function that
 * parked), for the task dump, the deadlock report and the watchdog.
 *
 * Nothing is recorded at park time: a parked task's registers are on its
 * own stack (ctx.h: weft__ctx_jump pushed the callee-saved ones and the
 * return address), so the walk starts from there, as a debugger's does
 * from a stopped thread, and costs nothing until a dump asks.
 *
 * The walk, with libdw (elfutils; WEFT_LIBDW at build time): libdw's
 * unwinder reads the call frame information (.eh_frame, which every
 * object has, frame pointers or not) and asks this file for every word of
 * memory it reads: only words inside the task's stack are given
 * (memory_read), so a task that wakes and scribbles over its stack while
 * the dump reads it yields a short or wrong stack, never a read outside
 * it. The stack is mapped for as long as the task is a member of its
 * scope, and the dump reads it under that scope's lock. Each return
 * address is then symbolized with its inline calls expanded (function,
 * file, line from DWARF), through a cache of a fixed size: ten thousand
 * tasks parked at the same line cost one lookup.
 *
 * Without libdw: frame pointers are followed (rbp on x86-64, x29 on
 * aarch64), bounded by the stack as above, and each address is named with
 * dladdr (exported symbols only) as object+offset, for addr2line. That
 * walk needs code built with -fno-omit-frame-pointer; without it the
 * stack ends early.
 *
 * The blocking frame: frames are walked innermost first; the scheduler's
 * and the wait layer's frames come first, then the public weft function
 * that parked (a name beginning with "weft_"; it may be inlined into its
 * caller), then any weft function that called it, then the caller: the
 * first frame that is not weft's, by its name or by its source file,
 * is the answer. A wait with no caller outside weft on its stack (an
 * actor between messages, a supervisor's loop) has none.
 *
 * libdw is not thread-safe: every use is under one mutex (sym_mu).
 */
#include "observe/where.h"
#include "sched/scheduler.h"
#include "sched/task.h"
#include "util/fault.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(WEFT_HAVE_LIBDW)
#include <dwarf.h>
#include <elfutils/libdwfl.h>
#endif

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define NO_SAN __attribute__((no_sanitize("address", "thread")))
#endif
#endif
#if !defined(NO_SAN) && (defined(WEFT_ASAN) || defined(WEFT_TSAN))
#define NO_SAN __attribute__((no_sanitize_address, no_sanitize_thread))
#endif
#if !defined(NO_SAN)
#define NO_SAN
#endif

/* A return address's symbols: the physical frame and the calls inlined
 * into it, innermost first. */
#define INLINE_MAX 8 /* the outermost are kept: the caller is there */
typedef struct sym {
    uintptr_t pc; /* 0: an empty slot */
    int n;
    struct {
        const char *func, *file;
        const char *decl; /* the file that defines func, or NULL */
        int line;
    } f[INLINE_MAX];
    const char *module; /* dladdr's object (no libdw), or NULL */
    uintptr_t offset;
} sym;

#define CACHE_SLOTS 2048 /* direct-mapped: a colliding address replaces */

static pthread_mutex_t sym_mu = PTHREAD_MUTEX_INITIALIZER;
static sym *cache; /* under sym_mu; allocated at the first use */

/* The stack being walked (under sym_mu): reads stay in [lo, hi). A
 * compact task whose stack was given back is read from its image: [sp, a)
 * and [b, hi) are there, one after the other, from img; the rest (below
 * sp, the hole) is read as nothing. */
typedef struct walk {
    uintptr_t lo, hi;
    const char *img; /* NULL: the stack itself */
    uintptr_t img_sp, img_a, img_b;
    uintptr_t pc, sp, fp;
    uintptr_t regs[8]; /* x86-64: rbx r12 r13 r14 r15; aarch64: x19-x28 */
    uintptr_t *pcs;
    int n, max;
} walk;

/* A word of a compact task's image: a heap buffer, unlike a stack, so
 * ASan checks this read (an image freed under the walk is reported).
 * TSan does not: the worker may be copying a newer image in, which the
 * walk reads stale, as it reads a stack. Out of line, so that read_word's
 * exemption does not cover it. */
#if defined(WEFT_TSAN)
NO_SAN
#endif
static __attribute__((noinline)) uintptr_t image_word(const char *at)
{
    return *(const volatile uintptr_t *)(const void *)at;
}

NO_SAN static bool read_word(const walk *w, uintptr_t addr, uintptr_t *out)
{
    if (addr < w->lo || addr > w->hi - sizeof(uintptr_t) ||
        addr % sizeof(uintptr_t))
        return false;
    if (w->img) {
        const char *at;
        if (addr >= w->img_sp && addr + sizeof(uintptr_t) <= w->img_a)
            at = w->img + (addr - w->img_sp);
        else if (addr >= w->img_b)
            at = w->img + (w->img_a - w->img_sp) + (addr - w->img_b);
        else
            return false;
        *out = image_word(at);
        return true;
    }
    *out = *(const volatile uintptr_t *)addr;
    return true;
}

/* Whether t is compact: a bit set for its life, in a word its worker
 * writes (its other bits) while the walk reads. */
NO_SAN static bool is_compact(const weft_task *t)
{
    return (*(const volatile unsigned *)&t->flags & TASK_COMPACT) != 0;
}

#if !defined(WEFT_UCONTEXT) /* (ucontext: no walk, compact tasks plain) */
/* A compact task (the caller holds weft__image_lock): if its stack was
 * given back, the walk reads its image, whose layout is checked against
 * the stack's bounds first (the task may have run and parked again since
 * its flags were read). False if it cannot be walked. */
NO_SAN static bool image_view(walk *w, const weft_task *t, uintptr_t sp)
{
    if (!(*(const volatile unsigned *)&t->flags & TASK_RELEASED))
        return true; /* its stack is where it was */
    /* weft__compact_of without its assert, a read of the flags that
     * would race with the worker's writes of its other bits. */
    const weft__compact *cp =
        (const weft__compact *)(const void *)((const char *)t +
                                              WEFT__COMPACT_HEAD);
    /* Each field read once (volatile): the checks below hold for the
     * values used, though the worker may write len and the hole's
     * fields meanwhile (img and cap only under the image lock). */
    const char *img = *(const char *const volatile *)&cp->img;
    uint32_t len = *(const volatile uint32_t *)&cp->len;
    uint32_t cap = *(const volatile uint32_t *)&cp->cap;
    uint32_t hole = *(const volatile uint32_t *)&cp->hole;
    uint16_t hole_len = *(const volatile uint16_t *)&cp->hole_len;
    uintptr_t a = sp, b = sp;
    if (hole) {
        a = w->hi - hole;
        b = a + hole_len;
    }
    if (!img || sp < w->lo || sp % 8 || a < sp || b < a || b > w->hi ||
        len > cap || (a - sp) + (w->hi - b) != len)
        return false;
    w->img = img;
    w->img_sp = sp;
    w->img_a = a;
    w->img_b = b;
    return true;
}
#endif

/* The registers a parked task's context saved (context/ctx.h, context/\*.S).
 * compact: is_compact(t), which the caller read to take the image lock. */
NO_SAN static bool walk_from_task(walk *w, const weft_task *t, bool compact)
{
#if defined(WEFT_UCONTEXT)
    WEFT_UNUSED(w);
    WEFT_UNUSED(t);
    WEFT_UNUSED(compact);
    return false;
#else
    w->lo = (uintptr_t)t->stack_lo;
    w->hi = (uintptr_t)t->stack_hi;
    uintptr_t sp = (uintptr_t)t->ctx.sp, v;
    /* A compact task's stack may have been given back while it is parked
     * (its used part copied to its image, stack.c). */
    if (compact && !image_view(w, t, sp))
        return false;
#if defined(__x86_64__)
    /* +8 r15 +16 r14 +24 r13 +32 r12 +40 rbx +48 rbp +56 return address */
    static const int at[5] = {40, 32, 24, 16, 8}; /* rbx r12 r13 r14 r15 */
    for (int i = 0; i < 5; i++) {
        if (!read_word(w, sp + at[i], &v))
            return false;
        w->regs[i] = v;
    }
    if (!read_word(w, sp + 48, &w->fp) || !read_word(w, sp + 56, &w->pc))
        return false;
    w->sp = sp + 64;
#elif defined(__aarch64__)
    for (int i = 0; i < 8; i++) { /* x19-x26: enough for the CFI rules */
        if (!read_word(w, sp + 8 * (uintptr_t)i, &v))
            return false;
        w->regs[i] = v;
    }
    if (!read_word(w, sp + 80, &w->fp) || !read_word(w, sp + 88, &w->pc))
        return false;
    w->sp = sp + 176;
#else
    return false;
#endif
    return w->pc != 0;
#endif
}

/* Frame pointers: [fp] the caller's fp, [fp + 8] the return address, on
 * x86-64 and aarch64 alike. */
static void walk_fp(walk *w)
{
    uintptr_t fp = w->fp;
    w->pcs[w->n++] = w->pc;
    while (w->n < w->max) {
        uintptr_t next, ra;
        if (!read_word(w, fp, &next) || !read_word(w, fp + 8, &ra) || !ra)
            break;
        w->pcs[w->n++] = ra;
        if (next <= fp)
            break;
        fp = next;
    }
}

/* ---- libdw ---- */

#if defined(WEFT_HAVE_LIBDW)
static Dwfl *dwfl;        /* under sym_mu */
static bool dwfl_tried;   /* under sym_mu */
static bool dwfl_unwinds; /* its thread state is attached */
static walk *cur;         /* the walk memory_read serves, under sym_mu */

static pid_t next_thread(Dwfl *d, void *arg, void **thread_arg)
{
    WEFT_UNUSED(d);
    WEFT_UNUSED(arg);
    WEFT_UNUSED(thread_arg);
    return 0; /* no threads to list: walks name theirs (get_thread) */
}

static bool get_thread(Dwfl *d, pid_t tid, void *arg, void **thread_arg)
{
    WEFT_UNUSED(d);
    WEFT_UNUSED(tid);
    WEFT_UNUSED(arg);
    *thread_arg = cur;
    return true;
}

static bool memory_read(Dwfl *d, Dwarf_Addr addr, Dwarf_Word *result, void *arg)
{
    WEFT_UNUSED(d);
    WEFT_UNUSED(arg);
    uintptr_t v;
    if (!cur || !read_word(cur, (uintptr_t)addr, &v))
        return false;
    *result = v;
    return true;
}

static bool set_initial_registers(Dwfl_Thread *th, void *arg)
{
    const walk *w = arg;
    Dwarf_Word r[2];
#if defined(__x86_64__)
    /* DWARF numbers: 3 rbx, 6 rbp, 7 rsp, 12-15 r12-r15 */
    r[0] = w->regs[0];
    if (!dwfl_thread_state_registers(th, 3, 1, r))
        return false;
    r[0] = w->fp;
    r[1] = w->sp;
    if (!dwfl_thread_state_registers(th, 6, 2, r))
        return false;
    Dwarf_Word hi[4] = {w->regs[1], w->regs[2], w->regs[3], w->regs[4]};
    if (!dwfl_thread_state_registers(th, 12, 4, hi))
        return false;
#elif defined(__aarch64__)
    /* DWARF numbers: x19-x26 are 19-26, x29 29, sp 31 */
    Dwarf_Word x[8];
    for (int i = 0; i < 8; i++)
        x[i] = w->regs[i];
    if (!dwfl_thread_state_registers(th, 19, 8, x))
        return false;
    r[0] = w->fp;
    if (!dwfl_thread_state_registers(th, 29, 1, r))
        return false;
    r[0] = w->sp;
    if (!dwfl_thread_state_registers(th, 31, 1, r))
        return false;
#endif
    WEFT_UNUSED(r);
    dwfl_thread_state_register_pc(th, w->pc);
    return true;
}

static const Dwfl_Thread_Callbacks thread_cbs = {
    .next_thread = next_thread,
    .get_thread = get_thread,
    .memory_read = memory_read,
    .set_initial_registers = set_initial_registers,
};

static char *debuginfo_path;
static const Dwfl_Callbacks proc_cbs = {
    .find_elf = dwfl_linux_proc_find_elf,
    .find_debuginfo = dwfl_standard_find_debuginfo,
    .debuginfo_path = &debuginfo_path,
};

/* Under sym_mu: the process's modules, reported now (again: a library
 * loaded since). */
static void dw_report(void)
{
    dwfl_report_begin(dwfl);
    dwfl_linux_proc_report(dwfl, getpid());
    dwfl_report_end(dwfl, NULL, NULL);
    if (cache)
        memset(cache, 0, CACHE_SLOTS * sizeof(*cache)); /* names may go */
}

static void dw_init(void)
{
    if (dwfl_tried)
        return;
    dwfl_tried = true;
    dwfl = dwfl_begin(&proc_cbs);
    if (!dwfl)
        return;
    dw_report();
    dwfl_unwinds = dwfl_attach_state(dwfl, NULL, getpid(), &thread_cbs, NULL);
}

static int on_frame(Dwfl_Frame *fr, void *arg)
{
    walk *w = arg;
    Dwarf_Addr pc;
    bool activation;
    if (!dwfl_frame_pc(fr, &pc, &activation) || pc == 0)
        return DWARF_CB_ABORT;
    /* Every frame's pc is a return address, the first one too (saved by
     * the call to weft__ctx_jump). */
    w->pcs[w->n++] = (uintptr_t)pc;
    return w->n < w->max ? DWARF_CB_OK : DWARF_CB_ABORT;
}

static void walk_dw(walk *w)
{
    if (!dwfl_unwinds) {
        walk_fp(w);
        return;
    }
    cur = w;
    dwfl_getthread_frames(dwfl, getpid(), on_frame, w);
    cur = NULL;
    if (w->n == 0)
        w->pcs[w->n++] = w->pc;
}

static const char *call_file(Dwarf_Die *cu, Dwarf_Die *die, int *line)
{
    Dwarf_Attribute a;
    Dwarf_Word idx = 0, l = 0;
    Dwarf_Files *files;
    size_t nfiles;
    *line = 0;
    if (dwarf_formudata(dwarf_attr(die, DW_AT_call_file, &a), &idx) != 0 ||
        dwarf_getsrcfiles(cu, &files, &nfiles) != 0 || idx >= nfiles)
        return NULL;
    if (dwarf_formudata(dwarf_attr(die, DW_AT_call_line, &a), &l) == 0)
        *line = (int)l;
    return dwarf_filesrc(files, idx, NULL, NULL);
}

/* The functions containing a (the module's address): the subprogram and
 * the inlined calls down to the innermost, in chain[] outermost first;
 * returns how many (at most max). dwarf_getscopes misses them in the
 * units of a link-time optimisation (their abstract origins are in other
 * units), so the tree is walked here. */
static int scopes_at(Dwarf_Die *cu, Dwarf_Addr a, Dwarf_Die *chain, int max)
{
    Dwarf_Die parent = *cu, c;
    int n = 0;
    for (int depth = 0; depth < 64 && dwarf_child(&parent, &c) == 0; depth++) {
        bool found = false;
        do {
            int tag = dwarf_tag(&c);
            if (tag != DW_TAG_subprogram && tag != DW_TAG_inlined_subroutine &&
                tag != DW_TAG_lexical_block && tag != DW_TAG_namespace)
                continue;
            if (tag != DW_TAG_namespace && dwarf_haspc(&c, a) <= 0)
                continue;
            if (tag == DW_TAG_subprogram || tag == DW_TAG_inlined_subroutine) {
                if (n < max)
                    chain[n++] = c;
                else
                    memmove(chain, chain + 1,
                            (size_t)(max - 1) * sizeof(*chain)),
                        chain[max - 1] = c; /* keep the innermost */
            }
            found = true;
            break;
        } while (dwarf_siblingof(&c, &c) == 0);
        if (!found)
            break;
        parent = c;
    }
    return n;
}

/* The compile unit of a (a module's address). Through .debug_aranges if
 * there are (GCC writes them), else each unit's own ranges (clang writes
 * no .debug_aranges, and libdw before 0.191 finds nothing then). */
static Dwarf_Die *cu_of(Dwfl_Module *mod, Dwarf_Addr a, Dwarf_Addr *bias)
{
    Dwarf_Die *cu = dwfl_module_addrdie(mod, a, bias);
    if (cu)
        return cu;
    for (cu = NULL; (cu = dwfl_module_nextcu(mod, cu, bias)) != NULL;)
        if (dwarf_haspc(cu, a - *bias) > 0)
            return cu;
    return NULL;
}

/* A file name as the project names it: "./src/sync/chan.c" (a unit
 * compiled in ".", joined by libdw to its relative name) is
 * "src/sync/chan.c". */
static const char *tidy(const char *file)
{
    while (file && file[0] == '.' && file[1] == '/')
        file += 2;
    return file;
}

static void sym_fill(sym *s, uintptr_t pc)
{
    Dwarf_Addr a = pc - 1; /* inside the call, not after it */
    Dwfl_Module *mod = dwfl_addrmodule(dwfl, a);
    if (!mod)
        return;
    const char *name = dwfl_module_addrname(mod, a);
    int line = 0;
    Dwfl_Line *ln = dwfl_module_getsrc(mod, a);
    const char *file =
        ln ? dwfl_lineinfo(ln, NULL, &line, NULL, NULL, NULL) : NULL;
    Dwarf_Addr bias = 0;
    Dwarf_Die *cu = cu_of(mod, a, &bias);
    if (!file && cu) { /* no .debug_aranges: the unit found by its ranges */
        Dwarf_Line *dl = dwarf_getsrc_die(cu, a - bias);
        if (dl) {
            file = dwarf_linesrc(dl, NULL, NULL);
            dwarf_lineno(dl, &line);
        }
    }
    Dwarf_Die chain[32];
    int nc = cu ? scopes_at(cu, a - bias, chain, 32) : 0;
    int skip = nc > INLINE_MAX ? nc - INLINE_MAX : 0; /* innermost ones */
    for (int i = nc - 1; i >= 0; i--) {               /* innermost first */
        if (i < nc - skip) {
            s->f[s->n].func = dwarf_diename(&chain[i]);
            s->f[s->n].decl = tidy(dwarf_decl_file(&chain[i]));
            s->f[s->n].file = tidy(file);
            s->f[s->n].line = line;
            s->n++;
        }
        if (dwarf_tag(&chain[i]) == DW_TAG_inlined_subroutine)
            file = call_file(cu, &chain[i], &line); /* where it was called */
    }
    if (s->n == 0) { /* no DWARF: the symbol table's name */
        s->f[0].func = name;
        s->f[0].file = tidy(file);
        s->f[0].line = line;
        s->n = 1;
    } else if (!s->f[s->n - 1].func) {
        s->f[s->n - 1].func = name;
    }
}
#endif /* WEFT_HAVE_LIBDW */

/* ---- without libdw: dladdr ---- */

static void sym_fill_dladdr(sym *s, uintptr_t pc)
{
    Dl_info info;
    memset(&info, 0, sizeof(info));
    s->n = 1;
    if (!dladdr((void *)(pc - 1), &info))
        return;
    s->f[0].func = info.dli_sname;
    if (info.dli_fname) {
        const char *slash = strrchr(info.dli_fname, '/');
        s->module = slash ? slash + 1 : info.dli_fname;
        s->offset = pc - (uintptr_t)info.dli_fbase;
    }
}

/* Under sym_mu: pc's symbols, from the cache or looked up now. */
static const sym *sym_of(uintptr_t pc)
{
    static sym one; /* the cache, if it could not be allocated */
    if (!cache)
        cache = weft__calloc(CACHE_SLOTS, sizeof(*cache));
    sym *s = cache ? &cache[(pc * 0x9e3779b97f4a7c15ull) >> 53] : &one;
    if (s->pc == pc)
        return s;
    memset(s, 0, sizeof(*s));
    s->pc = pc;
#if defined(WEFT_HAVE_LIBDW)
    if (dwfl)
        sym_fill(s, pc);
#endif
    if (s->n == 0)
        sym_fill_dladdr(s, pc);
    return s;
}

/* ---- frames ---- */

static bool public_weft(const char *f)
{
    return f && strncmp(f, "weft_", 5) == 0 && f[5] != '_';
}

/* weft's own sources, as this file's __FILE__ names them: the directory
 * (src/, after -ffile-prefix-map), then one of the names WEFT_SOURCES
 * lists (set by the build: "sync/chan.c:sync/sync.h:...:
 * context/x86_64_sysv.S:"). A program's own src/main.c is not one of
 * them. */
#if !defined(WEFT_SOURCES)
#define WEFT_SOURCES ""
#endif

static bool weft_file(const char *file)
{
    static const char here[] = __FILE__;
    size_t dir = sizeof(here) - 1 - strlen("observe/where.c");
    if (!file || strncmp(file, here, dir) != 0)
        return false;
    const char *name = file + dir;
    size_t n = strlen(name);
    for (const char *p = WEFT_SOURCES; *p;) {
        const char *e = strchr(p, ':');
        size_t k = e ? (size_t)(e - p) : strlen(p);
        if (k == n && strncmp(p, name, n) == 0)
            return true;
        if (!e)
            break;
        p = e + 1;
    }
    return false;
}

/* By the file that defines the function when known: the line table may
 * give an inlined function's call the caller's line. */
static bool weft_frame(const weft__frame *f, const char *decl)
{
    return (f->func && strncmp(f->func, "weft_", 5) == 0) ||
           weft_file(decl ? decl : f->file);
}

/* Expands pcs into frames (under sym_mu) and finds the blocking one: the
 * first, outward, that is not weft's (by its name or its source file) and
 * either has a source file (debug information: the program's own code)
 * or comes after a public weft function (names only). */
static int expand(const uintptr_t *pcs, int npc, weft__stack *st)
{
    int n = 0;
    bool seen = false;
    st->at = st->from = -1;
    for (int i = 0; i < npc && n < WEFT__FRAMES_MAX; i++) {
        const sym *s = sym_of(pcs[i]);
        for (int k = 0; k < s->n && n < WEFT__FRAMES_MAX; k++) {
            if (k > 0 && s->f[k].func && s->f[k - 1].func &&
                strcmp(s->f[k].func, s->f[k - 1].func) == 0) {
                /* a function inlined into a part of itself (the
                 * compiler's split of a function): shown once, at the
                 * inner line */
                st->f[n - 1].inlined = k + 1 < s->n;
                continue;
            }
            weft__frame *f = &st->f[n];
            *f = (weft__frame){.pc = pcs[i],
                               .func = s->f[k].func,
                               .file = s->f[k].file,
                               .line = s->f[k].line,
                               .inlined = k + 1 < s->n,
                               .module = s->module,
                               .offset = s->offset};
            if (st->at < 0) {
                if (public_weft(f->func)) {
                    if (!seen)
                        st->from = n;
                    seen = true;
                } else if (!weft_frame(f, s->f[k].decl) && (f->file || seen)) {
                    st->at = n;
                    if (st->from < 0)
                        st->from = n > 0 ? n - 1 : 0;
                }
            }
            n++;
        }
    }
    st->n = n;
    return n;
}

/* libdw needs tens of KiB of stack (its first use: hundreds): on a task's
 * stack, with less room than this, the walk is not made. */
#define ROOM_NEEDED (192 * 1024)
#define SELF_ROOM_NEEDED (24 * 1024) /* backtrace alone */

static bool room_for(size_t need)
{
    weft_task *self = weft__current();
    if (!self || !self->stack_lo)
        return true; /* a thread's own stack */
    return (size_t)((char *)__builtin_frame_address(0) - self->stack_lo) >=
           need;
}

static bool room_to_walk(void)
{
    return room_for(ROOM_NEEDED);
}

struct big_call {
    void (*fn)(void *);
    void *arg;
};

static void *big_main(void *p)
{
    struct big_call *c = p;
    c->fn(c->arg);
    return NULL;
}

void weft__on_big_stack(void (*fn)(void *), void *arg)
{
    if (room_to_walk()) {
        fn(arg);
        return;
    }
    /* A task's stack: a thread of its own runs it, while the task's
     * worker waits (the callers block their thread anyway). */
    struct big_call c = {fn, arg};
    pthread_t th;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, 2 * 1024 * 1024);
    int rc = weft__fault_fails(WEFT_FAULT_THREAD)
                 ? errno
                 : pthread_create(&th, &at, big_main, &c);
    pthread_attr_destroy(&at);
    if (rc != 0) {
        fn(arg); /* no thread: the walks see no room and are left out */
        return;
    }
    pthread_join(th, NULL);
}

void weft__where_prepare(void)
{
#if defined(WEFT_HAVE_LIBDW)
    if (!room_to_walk())
        return;
    pthread_mutex_lock(&sym_mu);
    dw_init();
    pthread_mutex_unlock(&sym_mu);
#endif
}

int weft__task_stack(const weft_task *t, weft__stack *st)
{
    st->n = 0;
    st->at = st->from = -1;
    uintptr_t pcs[WEFT__FRAMES_MAX];
    walk w = {.pcs = pcs, .max = WEFT__FRAMES_MAX};
    if (!t->stack_lo || !room_to_walk())
        return 0;
    /* A compact task's image stays put until the walk is done. */
    bool compact = is_compact(t);
    if (compact)
        weft__image_lock();
    if (!walk_from_task(&w, t, compact)) {
        if (compact)
            weft__image_unlock();
        return 0;
    }
    pthread_mutex_lock(&sym_mu);
#if defined(WEFT_HAVE_LIBDW)
    dw_init();
    if (dwfl)
        walk_dw(&w);
    else
        walk_fp(&w);
#else
    walk_fp(&w);
#endif
    if (compact)
        weft__image_unlock();
    int n = expand(pcs, w.n, st);
    pthread_mutex_unlock(&sym_mu);
    return n;
}

void weft__where_warm(void)
{
    void *one[1];
    backtrace(one, 1); /* its first call loads libgcc_s: here, not on a
                        * task's stack */
}

int weft__self_pcs(uintptr_t *pcs, int max)
{
    void *ret[WEFT__FRAMES_MAX + 1];
    /* backtrace takes a few KiB (its first call loads libgcc_s) */
    if (!room_for(SELF_ROOM_NEEDED) || max <= 0)
        return 0;
    if (max > WEFT__FRAMES_MAX)
        max = WEFT__FRAMES_MAX;
    int n = backtrace(ret, max + 1);
    /* backtrace's first is this function's own pc: left out */
    for (int i = 1; i < n; i++)
        pcs[i - 1] = (uintptr_t)ret[i];
    return n > 0 ? n - 1 : 0;
}

int weft__pcs_stack(const uintptr_t *pcs, int n, weft__stack *st)
{
    st->n = 0;
    st->at = st->from = -1;
    if (n <= 0 || !room_to_walk())
        return 0;
    pthread_mutex_lock(&sym_mu);
#if defined(WEFT_HAVE_LIBDW)
    dw_init();
#endif
    int m = expand(pcs, n, st);
    pthread_mutex_unlock(&sym_mu);
    return m;
}

int weft__frame_format(const weft__frame *f, char *buf, size_t n)
{
    if (f->func && f->file)
        return snprintf(buf, n, "%s (%s:%d)", f->func, f->file, f->line);
    if (f->func && f->module)
        return snprintf(buf, n, "%s (%s+%#lx)", f->func, f->module,
                        (unsigned long)f->offset);
    if (f->func)
        return snprintf(buf, n, "%s (%#lx)", f->func, (unsigned long)f->pc);
    if (f->module)
        return snprintf(buf, n, "%#lx (%s+%#lx)", (unsigned long)f->pc,
                        f->module, (unsigned long)f->offset);
    return snprintf(buf, n, "%#lx", (unsigned long)f->pc);
}

struct where_call {
    const weft_task *t;
    char *buf;
    size_t n;
    int rc;
};

static void where_format(void *arg)
{
    struct where_call *c = arg;
    weft__stack st;
    if (weft__task_stack(c->t, &st) == 0 || st.at < 0)
        c->rc = -ENOENT;
    else
        weft__frame_format(&st.f[st.at], c->buf, c->n);
}

int weft__where_format(const weft_task *t, char *buf, size_t n)
{
    if (n)
        buf[0] = 0;
    if (PARK_STATE(ld_acq(&((weft_task *)t)->park)) == PARK_RUNNING)
        return -EBUSY;
    struct where_call c = {t, buf, n, 0};
    weft__on_big_stack(where_format, &c); /* from a task: on a thread */
    return c.rc;
}

int weft__where_pc(uintptr_t pc, weft__frame *f)
{
    *f = (weft__frame){.pc = pc};
    if (!room_to_walk())
        return -ENOENT;
    pthread_mutex_lock(&sym_mu);
#if defined(WEFT_HAVE_LIBDW)
    dw_init();
#endif
    const sym *s = sym_of(pc + 1); /* an entry point, not a return address */
    *f = (weft__frame){.pc = pc,
                       .func = s->f[s->n - 1].func,
                       .file = s->f[s->n - 1].file,
                       .line = s->f[s->n - 1].line,
                       .module = s->module,
                       .offset = s->offset};
    pthread_mutex_unlock(&sym_mu);
    return f->func || f->file ? 0 : -ENOENT;
}

bool weft__where_lines(void)
{
#if defined(WEFT_HAVE_LIBDW)
    return true;
#else
    return false;
#endif
}
