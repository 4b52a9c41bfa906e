/* SPDX-License-Identifier: MIT */
/*
 * fetch_queue: examples/fetch split into a producer and worker processes
 * over a NATS JetStream work queue (weft_nats), so that the fetching can
 * run on other machines than the asking, and survive a worker's death.
 *
 *   fetch_queue [-s SERVER] work [-c K] [-t SEC] [-r TRIES] [-n NAME]
 *   fetch_queue [-s SERVER] produce [-d SEC] [-k RUN] URL...  (or one a
 *                                                    line on stdin)
 *
 * SERVER is a NATS server with JetStream (nats-server -js), by default
 * nats://127.0.0.1:4222. Start any number of workers, on any machines
 * that reach the server, then the producer. On a fresh nats-server older
 * than April 2023 (Debian 12's 2.9.10), start one worker before the
 * others: those servers do not guard against two clients making the
 * queue at the same moment (docs/nats.md, "Work queues").
 *
 *   - The producer publishes each URL as a job on the stream FETCH
 *     (subject fetch.jobs), keyed by the run's name (-k) and a hash of the
 *     URL: the stream stores one job per key within its duplicate window,
 *     so a publish retried after an unknown outcome, a URL given twice,
 *     or a run published again under its name, makes one job. It
 *     then prints the results that workers publish on fetch.results, the
 *     first one for each key (a job done twice reports twice: the record
 *     of results is idempotent by key), until it has them all or its
 *     deadline (-d) passes, and says what is missing.
 *   - A worker's K tasks (-c, also the jobs it holds at once) take jobs
 *     from the shared consumer "fetchers", fetch each with libcurl through
 *     weft_curl (a timeout of -t per request), publish the result and ack
 *     the job. A timeout, a connection error, a 429 or a 5xx naks it, to
 *     be delivered again a second per delivery later (to any worker),
 *     until its TRIES-th delivery (-r), which reports the failure.
 *   - Ctrl-C on a worker cancels its tasks: each nacks the job it holds,
 *     at once, for another worker to take. A worker killed outright
 *     (SIGKILL, a machine lost) leaves its jobs taken: JetStream delivers
 *     them again after the consumer's ack_wait (30 s).
 *
 * Results travel on core NATS, which is at most once: a result published
 * while the producer is away is lost (the job was done; its ack stands).
 * Exit status: produce 0 if every URL succeeded, 1 otherwise; 2 usage.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* getopt_long */
#endif
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "weft_curl.h"
#include "weft_nats.h"

static const weft_nats_queue_opts queue_opts = {
    .stream = "FETCH", .subject = "fetch.jobs", .consumer = "fetchers"};
#define RESULTS "fetch.results"

static struct {
    const char *server;
    int concurrency; /* work -c */
    int64_t timeout; /* work -t, ns */
    int tries;       /* work -r */
    char name[48];   /* work -n */
    int64_t wait;    /* produce -d, ns */
    char run[64];    /* produce -k */
    char **urls;     /* produce */
    size_t nurls;
} opt = {.server = "nats://127.0.0.1:4222",
         .concurrency = 4,
         .timeout = 10 * WEFT_SEC,
         .tries = 3,
         .wait = 60 * WEFT_SEC};

#define KEY_MAX 96

/* A job's key: the run's name, "-", and FNV-1a's 64 bits of the URL in
 * hex (a key has no spaces and at most 128 bytes; a URL may have
 * either). */
static void url_key(const char *url, char key[KEY_MAX])
{
    uint64_t h = 0xcbf29ce484222325u;
    for (const unsigned char *p = (const unsigned char *)url; *p; p++)
        h = (h ^ *p) * 0x100000001b3u;
    snprintf(key, KEY_MAX, "%s-%016" PRIx64, opt.run, h);
}

/* Connects, with the connection's driver in a scope of its own, which
 * becomes the caller's current scope; shielded (shield set), a Ctrl-C
 * does not cancel it, and the connection stays up for the naks of the
 * tasks that Ctrl-C cancels, and for the close. */
static int open_queue(weft_scope **sc, weft_nats_conn **c, weft_nats_queue **q,
                      int max_in_flight, int shield)
{
    weft_time deadline = weft_now() + 10 * WEFT_SEC;
    weft_scope_opts so = {.shield = shield};
    int rc = weft_scope_open(sc, &so);
    if (rc != 0)
        return rc;
    weft_nats_opts no = {.url = opt.server, .name = opt.name};
    if ((rc = weft_nats_connect(*sc, &no, c, deadline)) != 0) {
        fprintf(stderr, "fetch_queue: %s: %s\n", opt.server, weft_strerror(rc));
        return rc;
    }
    weft_nats_queue_opts qo = queue_opts;
    qo.max_in_flight = max_in_flight;
    if ((rc = weft_nats_queue_new(q, *c, &qo, deadline)) != 0)
        fprintf(stderr, "fetch_queue: the work queue: %s%s\n",
                weft_strerror(rc),
                rc == -ESRCH ? " (is JetStream on? nats-server -js)" : "");
    return rc;
}

static void close_all(weft_scope *sc, weft_nats_conn *c, weft_nats_queue *q)
{
    if (q)
        weft_nats_queue_free(q);
    if (c)
        weft_nats_close(c, weft_now() + 5 * WEFT_SEC);
    weft_scope_join(sc);
    weft_scope_free(sc);
}

/* ---- the worker ---- */

static weft_nats_conn *conn;
static weft_nats_queue *queue;

static size_t count_body(char *data, size_t size, size_t n, void *arg)
{
    (void)data;
    *(int64_t *)arg += (int64_t)(size * n);
    return size * n;
}

/* Fetches url: 0 and *status, or weft_curl's negative code (why: its
 * words). */
static int fetch(CURL *easy, const char *url, long *status, int64_t *bytes,
                 char *why)
{
    *bytes = 0;
    *status = 0;
    why[0] = 0;
    curl_easy_setopt(easy, CURLOPT_URL, url);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, bytes);
    CURLcode code;
    int rc = weft_curl_perform_ex(easy, &code, weft_now() + opt.timeout);
    if (rc == 0)
        curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, status);
    else if (!why[0])
        snprintf(why, CURL_ERROR_SIZE, "%s", weft_strerror(rc));
    return rc;
}

static int fetcher(void *arg)
{
    (void)arg;
    char why[CURL_ERROR_SIZE];
    CURL *easy = curl_easy_init();
    if (!easy)
        return -ENOMEM;
    curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, why);
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, count_body);
    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(easy, CURLOPT_USERAGENT, "weft-fetch-queue/1");
    natsMsg *job;
    int rc;
    while ((rc = weft_nats_job_take(queue, &job, WEFT_NEVER)) == 0) {
        char url[2048];
        int n = natsMsg_GetDataLength(job);
        snprintf(url, sizeof url, "%.*s", n, natsMsg_GetData(job));
        const char *key = weft_nats_job_key(job);
        int delivery = weft_nats_job_deliveries(job);
        long status;
        int64_t bytes;
        printf("%s: take  %s (delivery %d)\n", opt.name, url, delivery);
        weft_time t0 = weft_now();
        rc = fetch(easy, url, &status, &bytes, why);
        int64_t ms = (weft_now() - t0) / WEFT_MSEC;
        if (rc == -ECANCELED) { /* Ctrl-C: give it back, at once */
            printf("%s: back  %s: stopped, given back\n", opt.name, url);
            weft_nats_job_nak(queue, job, 0);
            break;
        }
        bool again = rc != 0 || status == 429 || status >= 500;
        if (again && delivery < opt.tries) {
            printf("%s: again %s: %s, in %d s\n", opt.name, url,
                   rc ? why : "server error", delivery);
            weft_nats_job_nak(queue, job, delivery * WEFT_SEC);
            continue;
        }
        /* The result: "<key> <status> <bytes> <ms> <delivery> <worker>
         * <url or error>"; status 0 with the error when none came. */
        char res[2600];
        int len = snprintf(res, sizeof res,
                           "%s %ld %" PRId64 " %" PRId64 " %d %s %s%s%s", key,
                           status, bytes, ms, delivery, opt.name, url,
                           rc ? ": " : "", rc ? why : "");
        printf("%s: done  %s: %ld, %" PRId64 " bytes, %" PRId64 " ms\n",
               opt.name, url, status, bytes, ms);
        weft_nats_publish(conn, RESULTS, res, (size_t)len, WEFT_NEVER);
        /* Done: acked after its result is out. An ack whose outcome is
         * unknown may bring the job back; the producer keeps the first
         * result per key. */
        rc = weft_nats_job_ack(queue, job, weft_now() + 5 * WEFT_SEC);
        if (rc == -ECANCELED)
            break;
        if (rc != 0)
            fprintf(stderr, "%s: ack %s: %s\n", opt.name, key,
                    weft_strerror(rc));
    }
    curl_easy_cleanup(easy);
    return rc == -ECANCELED ? 0 : rc;
}

/* In the fetchers' scope, which is inside the connection's shield: a
 * shutdown (Ctrl-C) cancels that scope. */
static int on_shutdown(void *arg)
{
    int rc = weft_shutdown_wait(WEFT_NEVER);
    if (rc == 0)
        weft_scope_cancel(arg);
    return rc;
}

static int work(void *arg)
{
    (void)arg;
    weft_scope *sc;
    int rc = open_queue(&sc, &conn, &queue, opt.concurrency, 1);
    if (rc == 0) {
        printf("%s: taking jobs from %s, %d at a time\n", opt.name, opt.server,
               opt.concurrency);
        fflush(stdout);
        weft_scope *ws; /* the fetchers: a Ctrl-C cancels them */
        if ((rc = weft_scope_open(&ws, NULL)) == 0) {
            for (int i = 0; i < opt.concurrency && rc == 0; i++)
                rc = weft_spawn(ws, fetcher, NULL) < 0 ? -ENOMEM : 0;
            if (rc == 0 && weft_spawn(ws, on_shutdown, ws) < 0)
                rc = -ENOMEM;
            int jrc = weft_scope_join(ws);
            weft_scope_free(ws);
            rc = rc ? rc : jrc == -ECANCELED ? 0 : jrc;
        }
        printf("%s: stopped\n", opt.name);
    }
    close_all(sc, conn, queue);
    return rc;
}

/* ---- the producer ---- */

typedef struct wanted {
    char key[KEY_MAX];
    const char *url;
    bool reported, ok;
} wanted;

static int produce(void *arg)
{
    (void)arg;
    weft_scope *sc;
    weft_nats_sub *results = NULL;
    wanted *w = calloc(opt.nurls, sizeof *w);
    int rc = w ? open_queue(&sc, &conn, &queue, 1, 0) : -ENOMEM;
    /* Results first, so that none comes before we listen. */
    if (rc == 0)
        rc = weft_nats_subscribe(conn, RESULTS, NULL, &results,
                                 weft_now() + 5 * WEFT_SEC);
    size_t jobs = 0;
    for (size_t i = 0; rc == 0 && i < opt.nurls; i++) {
        url_key(opt.urls[i], w[jobs].key);
        w[jobs].url = opt.urls[i];
        bool dup = false;
        for (size_t k = 0; k < jobs && !dup; k++)
            dup = strcmp(w[k].key, w[jobs].key) == 0;
        /* An unknown outcome: the same key again is safe. */
        for (int t = 0; t < 3; t++) {
            rc = weft_nats_job_publish(queue, w[jobs].key, opt.urls[i],
                                       strlen(opt.urls[i]),
                                       weft_now() + 5 * WEFT_SEC);
            if (rc != WEFT_NATS_OUTCOME_UNKNOWN)
                break;
        }
        if (rc != 0)
            fprintf(stderr, "fetch_queue: publish %s: %s\n", opt.urls[i],
                    weft_strerror(rc));
        else if (dup)
            printf("%s: given twice, one job\n", opt.urls[i]);
        else
            jobs++;
    }
    if (rc == 0)
        printf("published %zu jobs\n", jobs);
    size_t got = 0, failed = 0;
    weft_time deadline = weft_now() + opt.wait;
    natsMsg *m;
    while (rc == 0 && got < jobs &&
           (rc = weft_nats_sub_recv(results, &m, deadline)) == 0) {
        char res[2600], key[KEY_MAX], who[64];
        long status;
        int64_t bytes, ms;
        int delivery, off = 0;
        snprintf(res, sizeof res, "%.*s", natsMsg_GetDataLength(m),
                 natsMsg_GetData(m));
        natsMsg_Destroy(m);
        if (sscanf(res, "%95s %ld %" SCNd64 " %" SCNd64 " %d %63s %n", key,
                   &status, &bytes, &ms, &delivery, who, &off) < 6 ||
            !off)
            continue;
        for (size_t k = 0; k < jobs; k++) {
            if (strcmp(w[k].key, key) != 0 || w[k].reported)
                continue; /* not ours, or a job done twice: once is kept */
            w[k].reported = true;
            w[k].ok = status > 0 && status < 400;
            failed += !w[k].ok;
            got++;
            printf("%-4s %3ld %8" PRId64 " bytes %5" PRId64
                   " ms  by %s, delivery %d  %s\n",
                   w[k].ok ? "ok" : "FAIL", status, bytes, ms, who, delivery,
                   res + off);
            fflush(stdout);
        }
    }
    if (rc == 0 || rc == -ETIMEDOUT || rc == -ECANCELED) {
        for (size_t k = 0; k < jobs; k++)
            if (!w[k].reported)
                printf("no result yet: %s\n", w[k].url);
        printf("%zu jobs: %zu succeeded, %zu failed, %zu without a result\n",
               jobs, got - failed, failed, jobs - got);
        rc = got == jobs && !failed ? 0 : 1;
    }
    if (results)
        weft_nats_sub_free(results);
    if (w && conn)
        close_all(sc, conn, queue);
    free(w);
    return rc;
}

/* ---- options ---- */

static int usage(FILE *f, int status)
{
    fprintf(f,
            "usage: fetch_queue [-s SERVER] work [-c K] [-t SEC] [-r TRIES] "
            "[-n NAME]\n"
            "       fetch_queue [-s SERVER] produce [-d SEC] [-k RUN] URL...  "
            " (no URL: one a line on stdin)\n"
            "  -s, --server URL   NATS server with JetStream "
            "(nats://127.0.0.1:4222)\n"
            "  -c K               work: K fetches at once (4)\n"
            "  -t SEC             work: per request (10)\n"
            "  -r TRIES           work: deliveries before a failure is "
            "final (3)\n"
            "  -n NAME            work: this worker's name (worker-PID)\n"
            "  -d SEC             produce: wait this long for results (60)\n"
            "  -k RUN             produce: the run's name, in every job's "
            "key: a run\n"
            "                     published again under its name makes no "
            "new jobs\n"
            "                     (within the stream's 2 minutes; default: "
            "a new name)\n");
    return status;
}

static bool seconds(const char *s, int64_t *ns)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !(v > 0 && v <= 86400))
        return false;
    *ns = (int64_t)(v * WEFT_SEC);
    return true;
}

static bool read_urls(void)
{
    char *line = NULL;
    size_t size = 0, cap = 0;
    ssize_t len;
    while ((len = getline(&line, &size, stdin)) >= 0) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == ' ' ||
                           line[len - 1] == '\r'))
            line[--len] = 0;
        if (len == 0 || line[0] == '#')
            continue;
        if (opt.nurls == cap) {
            cap = cap ? 2 * cap : 64;
            char **grown = realloc(opt.urls, cap * sizeof *grown);
            if (!grown)
                return false;
            opt.urls = grown;
        }
        if (!(opt.urls[opt.nurls++] = strdup(line)))
            return false;
    }
    free(line);
    return true;
}

/* Options up to the first word that is none ("+"): the global ones
 * before the command, the command's after it. Returns -1, or the exit
 * status of a usage error or of --help. */
static int parse(int argc, char **argv)
{
    static const struct option longs[] = {
        {"server", required_argument, NULL, 's'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    int o;
    long n;
    char *end;
    while ((o = getopt_long(argc, argv, "+s:c:t:r:n:d:k:h", longs, NULL)) !=
           -1) {
        bool ok = true;
        switch (o) {
        case 's':
            opt.server = optarg;
            break;
        case 'c':
        case 'r':
            n = strtol(optarg, &end, 10);
            ok = *optarg && !*end && n >= 1 && n <= 10000;
            *(o == 'c' ? &opt.concurrency : &opt.tries) = (int)n;
            break;
        case 't':
            ok = seconds(optarg, &opt.timeout);
            break;
        case 'd':
            ok = seconds(optarg, &opt.wait);
            break;
        case 'n':
            ok = strlen(optarg) < sizeof opt.name && !strchr(optarg, ' ');
            snprintf(opt.name, sizeof opt.name, "%s", optarg);
            break;
        case 'k':
            ok = *optarg && strlen(optarg) < sizeof opt.run &&
                 !strpbrk(optarg, " *>.");
            snprintf(opt.run, sizeof opt.run, "%s", optarg);
            break;
        case 'h':
            return usage(stdout, 0);
        default:
            return usage(stderr, 2);
        }
        if (!ok) {
            fprintf(stderr, "fetch_queue: bad value for -%c: %s\n", o, optarg);
            return usage(stderr, 2);
        }
    }
    return -1;
}

int main(int argc, char **argv)
{
    snprintf(opt.name, sizeof opt.name, "worker-%d", (int)getpid());
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    snprintf(opt.run, sizeof opt.run, "run%lld%d", (long long)now.tv_sec,
             (int)getpid());
    int status = parse(argc, argv);
    if (status >= 0)
        return status;
    if (optind >= argc)
        return usage(stderr, 2);
    const char *cmd = argv[optind++];
    if ((status = parse(argc, argv)) >= 0)
        return status;
    weft_fn fn;
    if (strcmp(cmd, "work") == 0 && optind == argc) {
        fn = work;
        setvbuf(stdout, NULL, _IOLBF, 0); /* a line per job, as it goes */
    } else if (strcmp(cmd, "produce") == 0) {
        fn = produce;
        opt.urls = argv + optind;
        opt.nurls = (size_t)(argc - optind);
        if (opt.nurls == 0 && (opt.urls = NULL, !read_urls())) {
            fprintf(stderr, "fetch_queue: out of memory\n");
            return 1;
        }
        if (opt.nurls == 0) {
            fprintf(stderr, "fetch_queue: no URLs\n");
            return usage(stderr, 2);
        }
    } else {
        return usage(stderr, 2);
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return 1;
    int rc = weft_main(fn, NULL); /* SIGINT/SIGTERM: a shutdown */
    curl_global_cleanup();
    if (rc < 0) {
        fprintf(stderr, "fetch_queue: %s\n", weft_strerror(rc));
        return 1;
    }
    return rc;
}
