/* SPDX-License-Identifier: MIT */
/*
 * The observe layer's stack walks (where.c), for the task dump, the
 * deadlock detector's reports and where.c itself.
 */
#ifndef WEFT_OBSERVE_WHERE_H
#define WEFT_OBSERVE_WHERE_H

#include "util/util.h"

/* ---- where.c: where a parked task waits, and its stack ---- */

#define WEFT__FRAMES_MAX 64 /* frames of a stack kept, inline calls too */

/* One frame of a task's stack. The strings are the symbolizer's (valid
 * for the process's life, as long as the library they name stays
 * loaded), or NULL when unknown. */
typedef struct weft__frame {
    uintptr_t pc;       /* the return address into this frame */
    const char *func;   /* the function, or NULL */
    const char *file;   /* its source file (as compiled), or NULL */
    int line;           /* 0: unknown */
    bool inlined;       /* a call inlined into the frame below it */
    const char *module; /* without line info: the object (its base name) */
    uintptr_t offset;   /* pc's offset in module (addr2line -e module) */
} weft__frame;

typedef struct weft__stack {
    weft__frame f[WEFT__FRAMES_MAX]; /* innermost first */
    int n;
    int from; /* the public weft function that parked, or -1 */
    int at;   /* the frame that called it: the blocking line, or -1 */
} weft__stack;

/* Walks t's stack from its saved context (t parked, and kept alive by the
 * caller: its home scope's lock held), reading only inside the stack, and
 * symbolizes it. Returns the number of frames (0: none, e.g. the
 * ucontext build). Any thread; may take milliseconds the first time (the
 * symbolizer loads the program's debug information). */
int weft__task_stack(const weft_task *t, weft__stack *st);
/* The return addresses of the calling thread's stack (a running task's),
 * its caller's first, into pcs[0 .. max): how many (0 on a task stack
 * with too little room). Cheap: no symbols. */
int weft__self_pcs(uintptr_t *pcs, int max);
/* Readies weft__self_pcs (its first call loads a library, which takes
 * more stack than a task may have left): on a thread's own stack. */
void weft__where_warm(void);
/* Symbolizes return addresses (from weft__self_pcs) as weft__task_stack
 * does a task's. */
int weft__pcs_stack(const uintptr_t *pcs, int n, weft__stack *st);
/* Runs fn(arg) on a stack with room for the walks: the calling thread's
 * own, or, on a task's stack, a thread's made for the call (joined before
 * it returns). */
void weft__on_big_stack(void (*fn)(void *), void *arg);
/* Loads the symbolizer, so that no lock need be held meanwhile. */
void weft__where_prepare(void);
/* "func (file:line)", "func (module+0xoff)" or "0xpc": snprintf's return. */
int weft__frame_format(const weft__frame *f, char *buf, size_t n);
/* t's blocking line, as weft__frame_format writes it, in buf (n bytes):
 * 0, -EBUSY (t is running: no saved context to walk), -ENOENT (no public
 * weft call on its stack, or no symbols). For the watchdog and others:
 * any thread (from a task, the walk runs on a thread made for it); the
 * caller keeps t alive (its home scope's lock, or t is known parked for
 * good). */
int weft__where_format(const weft_task *t, char *buf, size_t n);
/* The function at the entry point pc (an actor's behaviour, say), and
 * where it is defined: 0 or -ENOENT. */
int weft__where_pc(uintptr_t pc, weft__frame *f);
/* True if built with a symbolizer that gives file and line (libdw). */
bool weft__where_lines(void);

#endif
