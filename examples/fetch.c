/* SPDX-License-Identifier: MIT */
/*
 * fetch: fetch many URLs concurrently, politely, and say how it went.
 *
 *   fetch [OPTIONS] URL...        or one URL a line on stdin (no URL
 *   fetch [OPTIONS] < urls.txt    arguments, or "-" among them)
 *
 * Each URL is fetched with libcurl through weft_curl (weft_curl_perform
 * parks the task, not the worker). What the program shows, and where:
 *
 *   - Bounded concurrency: K fetcher tasks (-c) take URLs from a channel
 *     fed by one task, so at most K transfers are in flight, whatever the
 *     number of URLs or of workers. Each fetcher keeps one CURL easy
 *     handle for all its requests; the connections live in its worker's
 *     multi handle, so fetchers on one worker share them (keep-alive).
 *   - A timeout per request (-t): a weft deadline on each transfer.
 *   - Retries (-r) with exponential backoff and full jitter (weft_backoff,
 *     by hand, because a server's Retry-After overrides a delay): retried
 *     are timeouts, connection errors and resets, 429 and 5xx; never
 *     another 4xx.
 *   - Per host (host:port, as connections are): a circuit breaker
 *     (--breaker N:SEC, weft_breaker) and a token-bucket rate limit
 *     (--rate R, weft_limiter), shared by the fetchers of every worker:
 *     weft's primitives work across workers, so a table built once is all
 *     the sharing that is needed.
 *   - An overall deadline (-d): the deadline of the scope the fetchers run
 *     in. When it comes, transfers in flight are cancelled.
 *   - Ctrl-C (SIGINT) or SIGTERM: weft_main's shutdown request cancels
 *     the root scope, so every transfer in flight stops at once; the
 *     summary still comes, saying what was cancelled and what never
 *     started. A second Ctrl-C ends the process at once.
 *
 * Output: progress on stderr (one line redrawn in place on a terminal,
 * a line per URL otherwise, nothing with -q); the summary on stdout, as
 * text or, with --json, one JSON object per URL. Exit status: 0 all
 * succeeded, 1 some did not, 2 usage error, 130 interrupted.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* getopt_long, asprintf */
#endif
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "weft_curl.h"

/* ---- options ---- */

static struct {
    int concurrency;      /* -c: fetcher tasks, so transfers in flight */
    int64_t timeout;      /* -t: per request, ns */
    int retries;          /* -r: attempts after the first */
    int64_t base, cap;    /* --backoff: first delay, longest delay (ns) */
    int breaker_failures; /* --breaker N: consecutive failures; 0: off */
    int64_t breaker_cool; /* --breaker :SEC, ns */
    double rate;          /* --rate: requests per second per host; 0: off */
    int burst;            /* --burst: the token bucket's size */
    int64_t deadline;     /* -d: overall, ns; 0: none */
    const char *outdir;   /* -o: save bodies there; NULL: count bytes */
    const char *cacert;   /* --cacert */
    bool insecure, json, quiet;
} opt = {.concurrency = 8,
         .timeout = 10 * WEFT_SEC,
         .retries = 3,
         .base = 250 * WEFT_MSEC,
         .cap = 10 * WEFT_SEC,
         .burst = 1};

/* ---- state ---- */

/* A host:port, with what protects it. Made before weft_run; the breaker
 * and limiter are made by the root task and used from every worker. */
typedef struct host {
    char *key;             /* "example.com:443" */
    weft_breaker *breaker; /* NULL without --breaker */
    weft_limiter *limiter; /* NULL without --rate */
} host;

typedef enum job_state {
    JOB_NOT_STARTED = 0, /* no fetcher took it */
    JOB_OK,
    JOB_FAILED,
    JOB_CANCELLED, /* taken, then stopped by Ctrl-C or the deadline */
} job_state;

/* One URL. Its fetcher writes it; main reads it after weft_run. The write
 * callback runs on the same worker as the fetcher (weft_curl.h), so the
 * byte count needs no atomic. */
typedef struct job {
    const char *url; /* as given */
    char *target;    /* normalised by CURLU (scheme added), or NULL */
    host *host;      /* NULL if the URL did not parse */
    job_state state;
    long status;     /* the last HTTP status, 0 if none came */
    int64_t bytes;   /* body bytes of the last attempt */
    int attempts;    /* requests made */
    int64_t ms;      /* from taken to done, waits included */
    FILE *out;       /* the body's file during an attempt (-o) */
    int write_errno; /* the save failed: errno of fwrite */
    bool no_turn;    /* the rate limit had no turn before the deadline */
    char error[192]; /* why it failed, or was cancelled */
} job;

static struct {
    job *jobs;
    size_t njobs;
    host *hosts;
    size_t nhosts;
    weft_chan *queue;  /* job indices, feeder -> fetchers */
    weft_time started; /* weft_now() when the fetching started */
    int64_t elapsed;   /* ns, the whole run */
    enum { RAN, DEADLINE, INTERRUPTED } end;
    bool tty; /* progress redrawn in place */
    atomic_size_t done, failed, in_flight;
} app;

/* ---- progress (stderr) ---- */

static void progress(void)
{
    if (opt.quiet || !app.tty)
        return;
    fprintf(stderr, "\r%zu/%zu done, %zu failed, %zu in flight\033[K",
            atomic_load(&app.done), app.njobs, atomic_load(&app.failed),
            atomic_load(&app.in_flight));
}

/* A line of news. On a terminal it goes above the progress line, which is
 * drawn again under it. One fprintf per line: stdio locks the stream, so
 * lines from tasks on different workers do not mix. */
static void note(const char *fmt, ...)
{
    if (opt.quiet)
        return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s%s\n", app.tty ? "\r\033[K" : "", line);
    progress();
}

static void on_breaker(weft_breaker *b, weft_breaker_state from,
                       weft_breaker_state to, void *ctx)
{
    static const char *name[] = {"closed", "open", "half-open"};
    note("breaker %s: %s -> %s", ((host *)ctx)->key, name[from], name[to]);
}

/* The breaker counts outages: transport errors and 5xx (recorded as
 * negative statuses), not a cancelled transfer, which says nothing of the
 * host. */
static int is_outage(int status, void *ctx)
{
    return status < 0 && status != -ECANCELED;
}

/* ---- one request ---- */

static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
    job *j = arg;
    n *= size; /* size is 1 */
    /* A local file write is quick enough to make here, on the worker; a
     * slow sink would get the bytes through a channel instead. */
    if (j->out && fwrite(data, 1, n, j->out) != n) {
        j->write_errno = errno;
        return 0; /* libcurl aborts the transfer */
    }
    j->bytes += (int64_t)n;
    return n;
}

/* DIR/00042-example.com_path_file: the index keeps names apart. */
static void out_path(const job *j, char *path, size_t size)
{
    const char *s = strstr(j->target, "://");
    s = s ? s + 3 : j->target;
    int k =
        snprintf(path, size, "%s/%05zu-", opt.outdir, (size_t)(j - app.jobs));
    for (; *s && k + 1 < (int)size && k < 200; s++)
        path[k++] = isalnum((unsigned char)*s) || strchr(".-_", *s) ? *s : '_';
    path[k] = '\0';
}

/* The server's Retry-After in ns, seconds form only; -1 if none. */
static int64_t retry_after(CURL *easy)
{
#if LIBCURL_VERSION_NUM >= 0x075400 /* 7.84: the header API */
    struct curl_header *h;
    if (curl_easy_header(easy, "Retry-After", 0, CURLH_HEADER, -1, &h) !=
        CURLHE_OK)
        return -1;
    char *end;
    long long s = strtoll(h->value, &end, 10);
    if (end == h->value || *end || s < 0)
        return -1; /* an HTTP date, or junk: the backoff decides */
    return s > opt.cap / WEFT_SEC ? opt.cap : s * WEFT_SEC;
#else
    curl_off_t s = 0; /* 0 also when there is none */
    curl_easy_getinfo(easy, CURLINFO_RETRY_AFTER, &s);
    return s <= 0 ? -1 : s > opt.cap / WEFT_SEC ? opt.cap : s * WEFT_SEC;
#endif
}

typedef enum verdict { DONE, FAILED, RETRY, CANCELLED } verdict;

/* Turns a negative code of weft_curl into j->error: libcurl's words (its
 * sentence in why, the handle's CURLOPT_ERRORBUFFER, which says which host
 * or which part of the URL; else the name of its code), and the system's
 * for weft_curl's errno code. */
static void describe(job *j, int rc, CURLcode code, const char *why)
{
    if (j->write_errno)
        snprintf(j->error, sizeof j->error, "saving: %s",
                 strerror(j->write_errno));
    else if (code != CURLE_OK)
        snprintf(j->error, sizeof j->error, "%.150s (%s)",
                 why && why[0] ? why : curl_easy_strerror(code), strerror(-rc));
    else
        snprintf(j->error, sizeof j->error, "%s", strerror(-rc));
}

/* One attempt at j: the host's limiter, then its breaker, then the
 * transfer. *wait gets the server's Retry-After (or -1). */
static verdict attempt(CURL *easy, job *j, int64_t *wait)
{
    host *h = j->host;
    *wait = -1;
    if (h->limiter) {
        /* With no deadline of its own, the wait is refused at once
         * (-ETIMEDOUT) if the token comes after the scope's deadline. */
        int rc = weft_limiter_acquire(h->limiter, 1, WEFT_NEVER);
        j->no_turn = rc == -ETIMEDOUT;
        if (rc != 0)
            return CANCELLED;
    }
    char path[512];
    if (opt.outdir) {
        out_path(j, path, sizeof path);
        if (!(j->out = fopen(path, "wb"))) {
            snprintf(j->error, sizeof j->error, "%.120s: %s", path,
                     strerror(errno));
            return FAILED;
        }
    }
    if (h->breaker && weft_breaker_acquire(h->breaker) != 0) {
        if (j->out) {
            fclose(j->out);
            j->out = NULL;
            unlink(path);
        }
        char last[sizeof j->error];
        snprintf(last, sizeof last, "%s", j->error);
        snprintf(j->error, sizeof j->error, "circuit open%s%.160s%s",
                 *last ? " (last: " : "", last, *last ? ")" : "");
        return FAILED; /* fail fast: no request */
    }
    j->attempts++;
    j->bytes = 0;
    j->write_errno = 0;
    curl_easy_setopt(easy, CURLOPT_URL, j->target);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, j);
    CURLcode code;
    int rc = weft_curl_perform_ex(easy, &code, weft_now() + opt.timeout);
    long status = 0;
    if (rc == 0)
        curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
    if (j->out) {
        if (fclose(j->out) != 0 && rc == 0 && !j->write_errno)
            j->write_errno = errno;
        j->out = NULL;
        if (rc != 0 || status >= 400 || j->write_errno)
            unlink(path); /* keep only what succeeded */
    }
    if (h->breaker)
        weft_breaker_record(h->breaker, rc ? rc : status >= 500 ? -EIO : 0);

    if (rc == -ECANCELED)
        return CANCELLED;
    if (rc < 0 || j->write_errno) {
        char *why = NULL; /* the fetcher's error buffer */
        curl_easy_getinfo(easy, CURLINFO_PRIVATE, &why);
        describe(j, rc, code, why);
        if (j->write_errno)
            return FAILED;
        /* Timeouts, refused, reset and unreachable (weft's transient
         * set), and a body cut short (-EPIPE). */
        return weft_retry_transient(rc, NULL) || rc == -EPIPE ? RETRY : FAILED;
    }
    j->status = status;
    if (status < 400) {
        j->error[0] = '\0';
        return DONE;
    }
    snprintf(j->error, sizeof j->error, "HTTP %ld", status);
    if (status != 429 && status < 500)
        return FAILED; /* the request is wrong: asking again will not help */
    *wait = retry_after(easy);
    return RETRY;
}

/* ---- the tasks ---- */

static void report(const job *j)
{
    if (app.tty) {
        if (j->state == JOB_FAILED)
            note("FAIL %s: %s", j->url, j->error);
        else
            progress();
    } else if (j->state == JOB_OK)
        note("ok   %ld %lld bytes %d attempt%s %lld ms %s", j->status,
             (long long)j->bytes, j->attempts, j->attempts == 1 ? "" : "s",
             (long long)j->ms, j->url);
    else if (j->state == JOB_FAILED)
        note("FAIL %s, %d attempt%s: %s", j->url, j->attempts,
             j->attempts == 1 ? "" : "s", j->error);
}

/* Fetches one URL, with retries. */
static void fetch_one(CURL *easy, job *j)
{
    weft_time t0 = weft_now();
    atomic_fetch_add(&app.in_flight, 1);
    progress();
    weft_retry policy = {.base_ns = opt.base, /* delays only: the loop */
                         .cap_ns = opt.cap,   /* below counts attempts */
                         .jitter = WEFT_JITTER_FULL};
    weft_backoff b;
    weft_backoff_init(&b, &policy);
    verdict v = j->host ? RETRY : FAILED; /* no host: the URL's error */
    int64_t wait = -1;
    for (int k = 0; v == RETRY; k++) {
        if (k > 0) {
            if (k > opt.retries)
                break; /* out of attempts: the last error stands */
            /* The server's word first, else the backoff's delay. */
            int64_t delay = wait >= 0 ? wait : weft_backoff_next(&b);
            /* No sleep that the deadline would cut: fail now instead. */
            if (weft_now() + delay >= weft_deadline()) {
                size_t len = strlen(j->error);
                snprintf(j->error + len, sizeof j->error - len,
                         " (no time left to retry)");
                break;
            }
            if (weft_sleep_for(delay) != 0) {
                v = CANCELLED;
                break;
            }
        }
        v = attempt(easy, j, &wait);
    }
    j->state = v == DONE ? JOB_OK : v == CANCELLED ? JOB_CANCELLED : JOB_FAILED;
    j->ms = (weft_now() - t0) / WEFT_MSEC;
    atomic_fetch_sub(&app.in_flight, 1);
    if (j->state != JOB_CANCELLED)
        atomic_fetch_add(&app.done, 1);
    if (j->state == JOB_FAILED)
        atomic_fetch_add(&app.failed, 1);
    report(j);
}

static int fetcher(void *arg)
{
    CURL *easy = curl_easy_init();
    if (!easy)
        return -ENOMEM;
    /* libcurl's sentence on a failure, for describe (found through
     * CURLINFO_PRIVATE): weft_curl_perform's code says only what kind. */
    char why[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, why);
    curl_easy_setopt(easy, CURLOPT_PRIVATE, why);
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(easy, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(easy, CURLOPT_USERAGENT, "weft-fetch/1");
    if (opt.insecure) {
        curl_easy_setopt(easy, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(easy, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    if (opt.cacert)
        curl_easy_setopt(easy, CURLOPT_CAINFO, opt.cacert);
    size_t i;
    while (weft_chan_recv(app.queue, &i) == 0) /* -EPIPE: all taken */
        fetch_one(easy, &app.jobs[i]);
    curl_easy_cleanup(easy);
    return 0;
}

/* Hands out the URLs in order; stops when the scope is cancelled. */
static int feeder(void *arg)
{
    for (size_t i = 0; i < app.njobs; i++)
        if (weft_chan_send(app.queue, &i) != 0)
            break;
    weft_chan_close(app.queue);
    return 0;
}

/* Makes each host's breaker and limiter. */
static int protect_hosts(void)
{
    weft_breaker_opts bo = {.failure_threshold = opt.breaker_failures,
                            .cooldown_ns = opt.breaker_cool,
                            .half_open_calls = 1,
                            .is_failure = is_outage,
                            .on_change = on_breaker};
    int64_t per = (int64_t)(WEFT_SEC / opt.rate); /* ns per token */
    for (size_t i = 0; i < app.nhosts; i++) {
        host *h = &app.hosts[i];
        bo.ctx = h;
        int rc = 0;
        if (opt.breaker_failures)
            rc = weft_breaker_new(&h->breaker, &bo);
        if (!rc && opt.rate > 0)
            rc = weft_limiter_new(&h->limiter, 1, per > 0 ? per : 1, opt.burst);
        if (rc)
            return rc;
    }
    return 0;
}

static int root(void *arg)
{
    int rc = protect_hosts();
    if (!rc)
        rc = weft_chan_new(&app.queue, sizeof(size_t), opt.concurrency);
    if (rc)
        return rc;
    app.started = weft_now();
    weft_scope *s;
    weft_scope_opts so = {.policy = WEFT_COLLECT,
                          .deadline = opt.deadline ? app.started + opt.deadline
                                                   : WEFT_NEVER};
    if ((rc = weft_scope_open(&s, &so)) != 0)
        return rc;
    weft_spawn(s, feeder, NULL);
    /* Spread the fetchers over the workers: each has its own multi
     * handle, hence its own connections. */
    for (int k = 0; k < opt.concurrency; k++)
        weft_spawn_ex(s, fetcher, NULL,
                      &(weft_spawn_opts){.name = "fetcher",
                                         .worker = k % weft_workers() + 1});
    rc = weft_scope_join(s); /* -ETIMEDOUT: the deadline; -ECANCELED: ^C */
    weft_scope_free(s);
    app.elapsed = weft_now() - app.started;
    app.end = weft_shutdown_requested() ? INTERRUPTED
              : rc == -ETIMEDOUT        ? DEADLINE
                                        : RAN;
    for (size_t i = 0; i < app.nhosts; i++) {
        if (app.hosts[i].breaker)
            weft_breaker_free(app.hosts[i].breaker);
        if (app.hosts[i].limiter)
            weft_limiter_free(app.hosts[i].limiter);
    }
    weft_chan_unref(app.queue);
    return 0;
}

/* ---- the summary (stdout) ---- */

static void json_string(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

/* Why a job that did not finish did not, in buf. */
static const char *unfinished(const job *j, char *buf, size_t size)
{
    const char *by = app.end == INTERRUPTED ? "interrupted" : "deadline";
    if (j->state == JOB_NOT_STARTED)
        snprintf(buf, size, "not started (%s)", by);
    else if (j->no_turn)
        snprintf(buf, size,
                 "cancelled (no rate-limit turn before the "
                 "deadline)");
    else
        snprintf(buf, size, "cancelled (%s)%s%s", by,
                 *j->error ? ", last error: " : "", j->error);
    return buf;
}

static void summary_json(void)
{
    for (size_t i = 0; i < app.njobs; i++) {
        const job *j = &app.jobs[i];
        char why[256];
        printf("{\"url\":");
        json_string(j->url);
        printf(",\"ok\":%s,\"status\":", j->state == JOB_OK ? "true" : "false");
        if (j->status)
            printf("%ld", j->status);
        else
            printf("null");
        printf(",\"bytes\":%lld,\"attempts\":%d,\"ms\":%lld,\"error\":",
               (long long)j->bytes, j->attempts, (long long)j->ms);
        if (j->state == JOB_OK)
            printf("null");
        else
            json_string(j->state == JOB_FAILED
                            ? j->error
                            : unfinished(j, why, sizeof why));
        printf("}\n");
    }
}

static void summary_text(void)
{
    size_t n[4] = {0};
    int64_t bytes = 0;
    for (size_t i = 0; i < app.njobs; i++) {
        n[app.jobs[i].state]++;
        bytes += app.jobs[i].state == JOB_OK ? app.jobs[i].bytes : 0;
    }
    static const char *title[] = {"Not started", "Succeeded", "Failed",
                                  "Cancelled"};
    static const job_state order[] = {JOB_OK, JOB_FAILED, JOB_CANCELLED,
                                      JOB_NOT_STARTED};
    for (int o = 0; o < 4; o++) {
        job_state st = order[o];
        if (!n[st])
            continue;
        printf("%s (%zu):\n", title[st], n[st]);
        size_t shown = 0;
        char why[256];
        for (size_t i = 0; i < app.njobs; i++) {
            const job *j = &app.jobs[i];
            if (j->state != st)
                continue;
            if (st == JOB_NOT_STARTED && ++shown > 5) {
                printf("  ... and %zu more\n", n[st] - 5);
                break;
            }
            if (st == JOB_OK)
                printf("  %ld %10lld bytes %2d attempt%s %6lld ms  %s\n",
                       j->status, (long long)j->bytes, j->attempts,
                       j->attempts == 1 ? " " : "s", (long long)j->ms, j->url);
            else if (st == JOB_NOT_STARTED)
                printf("  %s\n", j->url);
            else
                printf("  %s: %s [%d attempt%s]\n", j->url,
                       st == JOB_FAILED ? j->error
                                        : unfinished(j, why, sizeof why),
                       j->attempts, j->attempts == 1 ? "" : "s");
        }
    }
    printf("%zu URLs: %zu succeeded, %zu failed, %zu cancelled, %zu not "
           "started; %lld bytes in %.2f s%s\n",
           app.njobs, n[JOB_OK], n[JOB_FAILED], n[JOB_CANCELLED],
           n[JOB_NOT_STARTED], (long long)bytes, app.elapsed / 1e9,
           app.end == INTERRUPTED ? " (interrupted)"
           : app.end == DEADLINE  ? " (deadline reached)"
                                  : "");
}

/* ---- setup: options, URLs, hosts ---- */

static int usage(FILE *f, int status)
{
    fprintf(f,
            "usage: fetch [OPTIONS] URL...   (no URL, or \"-\": one a line "
            "on stdin)\n"
            "  -c, --concurrency K   at most K transfers in flight (8)\n"
            "  -t, --timeout SEC     per request (10; fractions allowed)\n"
            "  -r, --retries N       retries of timeouts, connection "
            "errors, 429, 5xx (3)\n"
            "      --backoff B:C     full-jitter backoff from B s, at most C "
            "s (0.25:10);\n"
            "                        C also caps a server's Retry-After\n"
            "      --breaker N:SEC   per host: open after N consecutive "
            "failures, for SEC\n"
            "      --rate R          per host: at most R requests a second\n"
            "      --burst B         per host: bursts of up to B (1)\n"
            "  -d, --deadline SEC    stop everything after SEC\n"
            "  -o, --output DIR      save the bodies in DIR (default: count "
            "bytes)\n"
            "      --json            summary as JSON lines, one per URL\n"
            "  -k, --insecure        do not verify the server's certificate\n"
            "      --cacert FILE     CA certificates to verify it with\n"
            "  -q, --quiet           no progress\n"
            "  -h, --help            this text\n"
            "Exit status: 0 all succeeded, 1 some did not, 2 usage, "
            "130 interrupted.\n");
    return status;
}

/* SEC (fractions allowed, 0 < SEC <= a day) to ns. */
static bool seconds(const char *s, int64_t *ns)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !(v > 0 && v <= 86400))
        return false;
    *ns = (int64_t)(v * WEFT_SEC);
    return true;
}

/* Two numbers "A:B": the first an int (breaker) or seconds (backoff). */
static bool pair(const char *s, int64_t *a, bool a_is_seconds, int64_t *b)
{
    char first[64];
    const char *colon = strchr(s, ':');
    if (!colon || colon - s >= (ptrdiff_t)sizeof first)
        return false;
    snprintf(first, sizeof first, "%.*s", (int)(colon - s), s);
    char *end;
    long n = strtol(first, &end, 10);
    if (a_is_seconds ? !seconds(first, a) : (*end || n < 1 || n > 1000000))
        return false;
    if (!a_is_seconds)
        *a = n;
    return seconds(colon + 1, b);
}

static bool add_url(const char *url, size_t *cap)
{
    if (app.njobs == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        job *grown = realloc(app.jobs, *cap * sizeof(job));
        if (!grown)
            return false;
        app.jobs = grown;
    }
    char *copy = strdup(url);
    if (!copy)
        return false;
    app.jobs[app.njobs++] = (job){.url = copy};
    return true;
}

static bool read_urls(FILE *in, size_t *cap)
{
    char *line = NULL;
    size_t size = 0;
    ssize_t len;
    bool ok = true;
    while (ok && (len = getline(&line, &size, in)) >= 0) {
        char *s = line, *e = line + len;
        while (s < e && isspace((unsigned char)*s))
            s++;
        while (e > s && isspace((unsigned char)e[-1]))
            *--e = '\0';
        if (s < e && *s != '#') /* blank lines and comments skipped */
            ok = add_url(s, cap);
    }
    free(line);
    return ok;
}

/* Parses j's URL with CURLU and finds (or adds) its host:port. A URL
 * without a scheme gets http://, as curl does. Not thread-safe: runs
 * before weft_run. */
static bool find_host(job *j)
{
    CURLU *u = curl_url();
    char *name = NULL, *port = NULL, *key = NULL;
    CURLUcode uc = CURLUE_OUT_OF_MEMORY;
    if (u &&
        (uc = curl_url_set(u, CURLUPART_URL, j->url, CURLU_DEFAULT_SCHEME)) ==
            CURLUE_OK &&
        (uc = curl_url_get(u, CURLUPART_URL, &j->target, 0)) == CURLUE_OK &&
        (uc = curl_url_get(u, CURLUPART_HOST, &name, 0)) == CURLUE_OK &&
        (uc = curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT)) ==
            CURLUE_OK &&
        asprintf(&key, "%s:%s", name, port) < 0)
        key = NULL, uc = CURLUE_OUT_OF_MEMORY;
    curl_free(name);
    curl_free(port);
    curl_url_cleanup(u);
    if (uc != CURLUE_OK) {
        snprintf(j->error, sizeof j->error, "bad URL: %s",
                 curl_url_strerror(uc));
        return uc != CURLUE_OUT_OF_MEMORY;
    }
    /* A linear search: a few hosts is the common case. */
    for (size_t i = 0; i < app.nhosts; i++)
        if (strcmp(app.hosts[i].key, key) == 0) {
            j->host = &app.hosts[i];
            free(key);
            return true;
        }
    j->host = &app.hosts[app.nhosts++]; /* room for one per URL */
    *j->host = (host){.key = key};
    return true;
}

int main(int argc, char **argv)
{
    enum { BACKOFF = 256, BREAKER, RATE, BURST, JSON, CACERT };
    static const struct option longs[] = {
        {"concurrency", required_argument, NULL, 'c'},
        {"timeout", required_argument, NULL, 't'},
        {"retries", required_argument, NULL, 'r'},
        {"backoff", required_argument, NULL, BACKOFF},
        {"breaker", required_argument, NULL, BREAKER},
        {"rate", required_argument, NULL, RATE},
        {"burst", required_argument, NULL, BURST},
        {"deadline", required_argument, NULL, 'd'},
        {"output", required_argument, NULL, 'o'},
        {"json", no_argument, NULL, JSON},
        {"insecure", no_argument, NULL, 'k'},
        {"cacert", required_argument, NULL, CACERT},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    int o;
    int64_t n;
    char *end;
    while ((o = getopt_long(argc, argv, "c:t:r:d:o:kqh", longs, NULL)) != -1) {
        bool ok = true;
        switch (o) {
        case 'c':
        case 'r':
        case BURST:
            n = strtol(optarg, &end, 10);
            ok = *optarg && !*end && n >= (o == 'r' ? 0 : 1) && n <= 100000;
            *(o == 'c'   ? &opt.concurrency
              : o == 'r' ? &opt.retries
                         : &opt.burst) = (int)n;
            break;
        case 't':
            ok = seconds(optarg, &opt.timeout);
            break;
        case 'd':
            ok = seconds(optarg, &opt.deadline);
            break;
        case BACKOFF:
            ok = pair(optarg, &opt.base, true, &opt.cap) && opt.base <= opt.cap;
            break;
        case BREAKER:
            ok = pair(optarg, &n, false, &opt.breaker_cool);
            opt.breaker_failures = (int)n;
            break;
        case RATE:
            opt.rate = strtod(optarg, &end);
            ok = end != optarg && !*end && opt.rate > 0 && opt.rate <= 1e9;
            break;
        case 'o':
            opt.outdir = optarg;
            break;
        case JSON:
            opt.json = true;
            break;
        case 'k':
            opt.insecure = true;
            break;
        case CACERT:
            opt.cacert = optarg;
            break;
        case 'q':
            opt.quiet = true;
            break;
        case 'h':
            return usage(stdout, 0);
        default:
            return usage(stderr, 2);
        }
        if (!ok) {
            const struct option *l = longs;
            while (l->val != o)
                l++;
            fprintf(stderr, "fetch: bad value for --%s: %s\n", l->name, optarg);
            return usage(stderr, 2);
        }
    }

    if (opt.outdir && access(opt.outdir, W_OK | X_OK) != 0) {
        fprintf(stderr, "fetch: %s: %s\n", opt.outdir, strerror(errno));
        return 2;
    }
    size_t cap = 0;
    bool from_stdin = optind == argc;
    for (int i = optind; i < argc; i++)
        if (strcmp(argv[i], "-") == 0)
            from_stdin = true;
        else if (!add_url(argv[i], &cap))
            goto nomem;
    if (from_stdin && !read_urls(stdin, &cap))
        goto nomem;
    if (app.njobs == 0) {
        fprintf(stderr, "fetch: no URLs\n");
        return usage(stderr, 2);
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK ||
        !(app.hosts = calloc(app.njobs, sizeof(host))))
        goto nomem;
    for (size_t i = 0; i < app.njobs; i++)
        if (!find_host(&app.jobs[i]))
            goto nomem;
    app.tty = isatty(STDERR_FILENO);

    int rc = weft_main(root, NULL); /* SIGINT/SIGTERM: a shutdown */
    if (app.tty && !opt.quiet)
        fputc('\n', stderr); /* below the progress line */
    if (rc < 0) {
        fprintf(stderr, "fetch: %s\n", weft_strerror(rc));
        return 1;
    }
    if (opt.json)
        summary_json();
    else
        summary_text();
    fflush(stdout);
    int status = app.end == INTERRUPTED ? 130 : 0;
    for (size_t i = 0; i < app.njobs && !status; i++)
        status = app.jobs[i].state != JOB_OK;
    for (size_t i = 0; i < app.njobs; i++) {
        free((char *)app.jobs[i].url);
        curl_free(app.jobs[i].target);
    }
    for (size_t i = 0; i < app.nhosts; i++)
        free(app.hosts[i].key);
    free(app.jobs);
    free(app.hosts);
    curl_global_cleanup();
    return status;
nomem:
    fprintf(stderr, "fetch: out of memory\n");
    return 1;
}
