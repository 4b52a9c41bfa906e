/* SPDX-License-Identifier: MIT */
/*
 * nats_jobs with nats.c alone, from plain threads: a work-queue stream and
 * a durable pull consumer with explicit acks (as weft_nats_queue_new makes
 * them); on one connection 16 threads publish N jobs in all, each with
 * its key (Nats-Msg-Id) and waiting for the stream's acknowledgement
 * (js_Publish); on another, 16 threads, each with a pull subscription
 * bound to the consumer, fetch one job at a time
 * (natsSubscription_Fetch) and ack it synchronously (natsMsg_AckSync).
 * Every key must be done once. The clock runs from the first publish to
 * the last confirmed ack.
 *
 *   nats_jobs [N [URL]]       (URL: $NATS_URL, else nats://127.0.0.1:4222)
 * prints "BENCH nats_jobs natsc <jobs/s> jobs/s"
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nats/nats.h>

#define SIDE 16

static long n_jobs;
static jsCtx *pjs, *cjs;
static _Atomic long next_job, done;
static _Atomic unsigned char *seen;
static _Atomic int failed;
static int64_t t0, elapsed;

static int64_t clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void *producer(void *arg)
{
    (void)arg;
    long i;
    while ((i = atomic_fetch_add(&next_job, 1)) < n_jobs) {
        char key[32];
        int n = snprintf(key, sizeof key, "job-%ld", i);
        jsPubOptions po;
        jsPubOptions_Init(&po);
        po.MsgId = key;
        jsPubAck *pa = NULL;
        jsErrCode jerr = 0;
        if (js_Publish(&pa, pjs, "bench.jobs", key, n, &po, &jerr) != NATS_OK) {
            fprintf(stderr, "nats_jobs: publish: %s\n",
                    nats_GetLastError(NULL));
            atomic_store(&failed, 1);
            return NULL;
        }
        jsPubAck_Destroy(pa);
    }
    return NULL;
}

static void *consumer(void *arg)
{
    (void)arg;
    jsSubOptions so;
    jsSubOptions_Init(&so);
    so.Stream = "BENCH";
    so.Consumer = "workers";
    natsSubscription *sub = NULL;
    jsErrCode jerr = 0;
    if (js_PullSubscribe(&sub, cjs, "bench.jobs", "workers", NULL, &so,
                         &jerr) != NATS_OK) {
        fprintf(stderr, "nats_jobs: subscribe: %s\n", nats_GetLastError(NULL));
        atomic_store(&failed, 1);
        return NULL;
    }
    while (atomic_load(&done) < n_jobs && !atomic_load(&failed)) {
        natsMsgList list = {0};
        natsStatus s = natsSubscription_Fetch(&list, sub, 1, 100, &jerr);
        if (s == NATS_TIMEOUT)
            continue;
        if (s != NATS_OK) {
            fprintf(stderr, "nats_jobs: fetch: %s\n", natsStatus_GetText(s));
            atomic_store(&failed, 1);
            break;
        }
        for (int k = 0; k < list.Count; k++) {
            const char *key = NULL;
            natsMsgHeader_Get(list.Msgs[k], "Nats-Msg-Id", &key);
            long i = key ? atol(key + 4) : -1;
            if (i < 0 || i >= n_jobs || atomic_fetch_add(&seen[i], 1) != 0 ||
                natsMsg_AckSync(list.Msgs[k], NULL, &jerr) != NATS_OK) {
                atomic_store(&failed, 1);
                break;
            }
            if (atomic_fetch_add(&done, 1) + 1 == n_jobs)
                elapsed = clock_ns() - t0;
        }
        natsMsgList_Destroy(&list);
    }
    natsSubscription_Destroy(sub);
    return NULL;
}

static natsConnection *connect_to(const char *url, jsCtx **js)
{
    natsConnection *nc = NULL;
    if (natsConnection_ConnectTo(&nc, url) != NATS_OK ||
        natsConnection_JetStream(js, nc, NULL) != NATS_OK) {
        fprintf(stderr, "nats_jobs: connect %s: %s\n", url,
                nats_GetLastError(NULL));
        exit(1);
    }
    return nc;
}

int main(int argc, char **argv)
{
    n_jobs = argc > 1 ? atol(argv[1]) : 50000;
    const char *url = argc > 2             ? argv[2]
                      : getenv("NATS_URL") ? getenv("NATS_URL")
                                           : "nats://127.0.0.1:4222";
    if (n_jobs <= 0)
        return 2;
    seen = calloc((size_t)n_jobs, 1);
    natsConnection *pc = connect_to(url, &pjs), *cc = connect_to(url, &cjs);
    jsStreamConfig sc;
    jsStreamConfig_Init(&sc);
    const char *subjects[] = {"bench.jobs"};
    sc.Name = "BENCH";
    sc.Subjects = subjects;
    sc.SubjectsLen = 1;
    sc.Retention = js_WorkQueuePolicy;
    sc.Storage = js_FileStorage;
    jsConsumerConfig cfg;
    jsConsumerConfig_Init(&cfg);
    cfg.Durable = "workers";
    cfg.AckPolicy = js_AckExplicit;
    cfg.AckWait = 30 * (int64_t)1000000000;
    jsErrCode jerr = 0;
    if (js_AddStream(NULL, pjs, &sc, NULL, &jerr) != NATS_OK ||
        js_AddConsumer(NULL, pjs, "BENCH", &cfg, NULL, &jerr) != NATS_OK) {
        fprintf(stderr, "nats_jobs: stream or consumer: %s (%d)\n",
                nats_GetLastError(NULL), (int)jerr);
        return 1;
    }
    pthread_t th[2 * SIDE];
    t0 = clock_ns();
    for (int i = 0; i < SIDE; i++) {
        pthread_create(&th[2 * i], NULL, producer, NULL);
        pthread_create(&th[2 * i + 1], NULL, consumer, NULL);
    }
    for (int i = 0; i < 2 * SIDE; i++)
        pthread_join(th[i], NULL);
    jsCtx_Destroy(pjs);
    jsCtx_Destroy(cjs);
    natsConnection_Destroy(pc);
    natsConnection_Destroy(cc);
    nats_Close();
    if (atomic_load(&failed))
        return 1;
    for (long i = 0; i < n_jobs; i++)
        if (seen[i] != 1) {
            fprintf(stderr, "nats_jobs: job-%ld done %d times\n", i, seen[i]);
            return 1;
        }
    printf("BENCH nats_jobs natsc %.0f jobs/s\n",
           (double)n_jobs * 1e9 / (double)elapsed);
    return 0;
}
