/* SPDX-License-Identifier: MIT */
/*
 * The runtime asserts (src/util/util.h, WEFT_ASSERT): with asserts on (Debug
 * builds, -DWEFT_ASSERTS=ON), a failed one writes where and what to
 * stderr and aborts; off, the condition is not even evaluated.
 */
#include "t.h"
#include "util/util.h"
#include "weft.h"

#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int evaluated;

/* With asserts off it is named only inside sizeof, never called: unused
 * then, for clang's -Wunneeded-internal-declaration. */
__attribute__((unused)) static bool count_and_fail(void)
{
    evaluated++;
    return false;
}

/* Runs fn in a child whose stderr is a pipe: its output, and how the
 * child ended. */
static void run_child(void (*fn)(void), char *out, size_t cap, int *status)
{
    int fds[2];
    ASSERT(pipe(fds) == 0);
    pid_t pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        fn();
        _exit(0);
    }
    close(fds[1]);
    size_t n = 0;
    ssize_t k;
    while (n + 1 < cap && (k = read(fds[0], out + n, cap - 1 - n)) > 0)
        n += (size_t)k;
    out[n] = '\0';
    close(fds[0]);
    ASSERT(waitpid(pid, status, 0) == pid);
}

static void fails(void)
{
    WEFT_ASSERT_MSG(count_and_fail(), "told why");
}

TEST(failure_reports_and_aborts_or_compiles_out)
{
    char out[1024];
    int status;
    run_child(fails, out, sizeof(out), &status);
#if defined(WEFT__ASSERTS)
    ASSERT(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
    ASSERT(strstr(out, "weft: assertion failed at ") == out);
    ASSERT(strstr(out, "test_assert.c:") != NULL);
    ASSERT(strstr(out, " in fails(): count_and_fail() (told why)\n") != NULL);
#else
    /* Compiled out: not evaluated, nothing written, no abort. */
    ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ASSERT_EQ(out[0], '\0');
#endif
}

TEST(passing_assert_evaluates_once_when_on)
{
    evaluated = 0;
    WEFT_ASSERT(!count_and_fail());
#if defined(WEFT__ASSERTS)
    ASSERT_EQ(evaluated, 1);
#else
    ASSERT_EQ(evaluated, 0);
#endif
}
