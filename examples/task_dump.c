/* SPDX-License-Identifier: MIT */
/*
 * task_dump: a program that is stuck on purpose, and its task dump.
 *
 * Two workers wait for jobs that never come, a flusher holds the log's
 * mutex while it waits for a disk that never answers, a reporter waits
 * for that mutex, a ticker sleeps. After one second (of the virtual
 * clock: the program takes no real time) the main task writes a task
 * dump to stdout, then cancels everything. `task_dump --json` writes JSON
 * lines instead, `task_dump --stacks` adds each parked task's stack.
 * docs/debugging.md shows the output.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "weft.h"

static weft_chan *jobs;
static weft_mutex log_mu = WEFT_MUTEX_INIT;
static weft_event disk = WEFT_EVENT_INIT; /* never set */

static int worker(void *arg)
{
    (void)arg;
    int job;
    while (weft_chan_recv(jobs, &job) == 0) {
    }
    return 0;
}

static int flusher(void *arg)
{
    (void)arg;
    if (weft_mutex_lock(&log_mu) != 0)
        return 0;
    weft_event_wait(&disk); /* the write that never returns */
    weft_mutex_unlock(&log_mu);
    return 0;
}

static int reporter(void *arg)
{
    (void)arg;
    weft_sleep_for(WEFT_MSEC); /* after the flusher took the lock */
    if (weft_mutex_lock(&log_mu) == 0)
        weft_mutex_unlock(&log_mu);
    return 0;
}

static int ticker(void *arg)
{
    (void)arg;
    while (weft_sleep_for(5 * WEFT_SEC) == 0) {
    }
    return 0;
}

static int main_task(void *arg)
{
    unsigned flags = *(unsigned *)arg;
    if (weft_chan_new(&jobs, sizeof(int), 0) != 0)
        return -ENOMEM;
    weft_scope *s;
    weft_scope_open(&s, &(weft_scope_opts){.policy = WEFT_COLLECT});
    weft_spawn_ex(s, worker, NULL, &(weft_spawn_opts){.name = "worker"});
    weft_spawn_ex(s, worker, NULL, &(weft_spawn_opts){.name = "worker"});
    weft_spawn_ex(s, flusher, NULL, &(weft_spawn_opts){.name = "log flusher"});
    weft_spawn_ex(s, reporter, NULL, &(weft_spawn_opts){.name = "reporter"});
    weft_spawn_ex(s, ticker, NULL, &(weft_spawn_opts){.name = "ticker"});
    weft_sleep_for(WEFT_SEC);
    int rc = weft_dump(STDOUT_FILENO, flags);
    weft_scope_cancel(s);
    weft_scope_join(s);
    weft_scope_free(s);
    weft_chan_unref(jobs);
    return rc;
}

int main(int argc, char **argv)
{
    unsigned flags = 0;
    for (int i = 1; i < argc; i++)
        flags |= strcmp(argv[i], "--json") == 0     ? WEFT_DUMP_JSON
                 : strcmp(argv[i], "--stacks") == 0 ? WEFT_DUMP_STACKS
                                                    : 0;
    weft_config cfg = {.workers = 1, .clock = WEFT_CLOCK_VIRTUAL};
    int rc = weft_run(&cfg, main_task, &flags);
    if (rc < 0)
        fprintf(stderr, "task_dump: %s\n", weft_strerror(rc));
    return rc < 0;
}
