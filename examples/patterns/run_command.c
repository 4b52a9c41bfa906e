/* SPDX-License-Identifier: MIT */
/*
 * run_command: run a command with a timeout and capture its output
 * (subprocess.run(timeout=), Go's exec.CommandContext, Tokio's
 * Command::output under tokio::time::timeout, Trio's run_process).
 *
 * The child belongs to a scope with a deadline: when the deadline passes,
 * communicate returns -ECANCELED, and the scope's reaper sends SIGTERM to
 * the child's process group, then SIGKILL after the grace, and reaps it;
 * the scope's join returns -ETIMEDOUT once it has. No zombie, no process
 * left running, whichever way the call ends. Real processes and the real
 * clock (a child does not run on weft's virtual one): a 200 ms timeout.
 * Exits 1 unless the quick command's output and status, and the slow
 * one's timeout and SIGTERM, are what this says.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "weft.h"

#define MS WEFT_MSEC

/* Runs argv for at most timeout_ns, its output into out (cap bytes, *len
 * kept). Returns 0 with *status (the exit code, or -signal), -ETIMEDOUT
 * with *status (the child was killed and reaped), or the spawn's error. */
static int run_command(char *const *argv, int64_t timeout_ns, char *out,
                       size_t cap, size_t *len, int *status)
{
    weft_scope *s;
    weft_scope_open(&s,
                    &(weft_scope_opts){.deadline = weft_now() + timeout_ns});
    weft_process *p = NULL;
    weft_process_opts opts = {.argv = argv, .out = WEFT_STDIO_PIPE};
    int rc = weft_process_spawn(s, &opts, &p);
    if (rc == 0) {
        weft_process_output o = {.data = out, .cap = cap};
        rc = weft_process_communicate(p, NULL, 0, &o, NULL, status, WEFT_NEVER);
        *len = o.len;
    }
    int jrc = weft_scope_join(s); /* returns once the child is reaped */
    weft_scope_free(s);
    if (p) {
        if (jrc == -ETIMEDOUT)
            weft_process_join(p, status); /* how it ended: -SIGTERM */
        weft_process_free(p);
    }
    return jrc == -ETIMEDOUT ? -ETIMEDOUT : rc;
}

static int run(void *arg)
{
    char out[64];
    size_t len = 0;
    int st1 = -1, st2 = -1;
    int rc1 = run_command((char *[]){"echo", "hello", NULL}, 200 * MS, out,
                          sizeof out, &len, &st1);
    printf("echo hello: %s, status %d, output \"%.*s\"\n", weft_strerror(rc1),
           st1, (int)(len && out[len - 1] == '\n' ? len - 1 : len), out);
    int ok1 =
        rc1 == 0 && st1 == 0 && len == 6 && memcmp(out, "hello\n", 6) == 0;

    weft_time t0 = weft_now();
    int rc2 = run_command((char *[]){"sleep", "10", NULL}, 200 * MS, out,
                          sizeof out, &len, &st2);
    long long ms = (long long)((weft_now() - t0) / MS);
    printf("sleep 10: %s after %lld ms, status %d (-SIGTERM is %d)\n",
           weft_strerror(rc2), ms, st2, -SIGTERM);
    int ok2 = rc2 == -ETIMEDOUT && st2 == -SIGTERM && ms >= 200 && ms < 5000;
    return ok1 && ok2 ? 0 : -1;
}

int main(void)
{
    weft_config cfg = {.workers = 1};
    return weft_run(&cfg, run, NULL) == 0 ? 0 : 1;
}
