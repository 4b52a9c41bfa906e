/* SPDX-License-Identifier: MIT */
/*
 * resource_pool: reuse a few expensive connections among many tasks
 * (HikariCP, bb8 and deadpool, asyncpg's pool, Go's database/sql): at most
 * 2 exist, made on demand, borrowed and given back, a broken one replaced.
 *
 * Five requests arrive 1 ms apart. Connecting takes 5 ms, a query 10 ms.
 * Requests 1 and 2 make the two connections (done at 15 and 16 ms); 3 and
 * 4 wait in line and get them as 1 and 2 give them back (done at 25 and
 * 26 ms); 3's query finds its connection broken, gives it back as broken,
 * and 5, next in line, makes a new one in its place (done at 40 ms). Exits 1
 * unless the requests ended so, 3 connections were made and 1 destroyed, and
 * closing the pool destroyed the other 2.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "weft.h"

#define MS WEFT_MSEC
#define NOW_MS ((long long)(weft_now() / MS))

typedef struct conn {
    int id;
} conn;

static int made, live;

static int db_connect(void *ctx, void **out)
{
    (void)ctx;
    int rc = weft_sleep_for(5 * MS); /* the handshake */
    if (rc)
        return rc;
    conn *c = malloc(sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->id = ++made;
    live++;
    *out = c;
    return 0;
}

static void db_close(void *ctx, void *c)
{
    (void)ctx;
    live--;
    free(c);
}

static weft_pool *db;

typedef struct request {
    int id, rc, conn_id;
    weft_time end;
} request;

/* A query: request 3's finds its connection gone. */
static int query(conn *c, request *r)
{
    (void)c;
    int rc = weft_sleep_for(10 * MS);
    return rc ? rc : r->id == 3 ? -ECONNRESET : 0;
}

static int handle(void *arg)
{
    request *r = arg;
    void *c;
    weft_sleep_for((r->id - 1) * MS); /* they arrive 1 ms apart, in order */
    r->rc = weft_pool_acquire(db, &c, weft_now() + WEFT_SEC);
    if (r->rc != 0)
        return 0;
    r->conn_id = ((conn *)c)->id;
    r->rc = query(c, r);
    if (r->rc == -ECONNRESET)
        weft_pool_release_broken(db, c); /* destroyed; a new one may come */
    else
        weft_pool_release(db, c);
    r->end = weft_now();
    printf("t=%3lld ms  request %d on connection %d: %s\n", NOW_MS, r->id,
           r->conn_id, weft_strerror(r->rc));
    return 0;
}

static int run(void *arg)
{
    (void)arg;
    weft_pool_opts opts = {.create = db_connect,
                           .destroy = db_close,
                           .max_size = 2,
                           .idle_timeout_ns = 60 * WEFT_SEC,
                           .name = "db"};
    if (weft_pool_new(&db, &opts) != 0)
        return -1;
    request req[5];
    weft_scope *s;
    weft_scope_open(&s, NULL);
    for (int i = 0; i < 5; i++) {
        req[i] = (request){.id = i + 1};
        weft_spawn(s, handle, &req[i]);
    }
    weft_scope_join(s);
    weft_scope_free(s);

    weft_pool_stats st;
    weft_pool_stats_get(db, &st);
    printf("made %lld, destroyed %lld, idle %d\n", (long long)st.created,
           (long long)st.destroyed, st.idle);
    int ok = st.created == 3 && st.destroyed == 1 && st.idle == 2;
    ok &= weft_pool_close(db, WEFT_NEVER) == 0 && live == 0;
    ok &= weft_pool_free(db) == 0;

    const int want_rc[] = {0, 0, -ECONNRESET, 0, 0};
    const int want_conn[] = {1, 2, 1, 2, 3};
    const int64_t want_end[] = {15, 16, 25, 26, 40};
    for (int i = 0; i < 5; i++)
        ok &= req[i].rc == want_rc[i] && req[i].conn_id == want_conn[i] &&
              req[i].end == want_end[i] * MS;
    return ok ? 0 : -1;
}

int main(void)
{
    weft_config cfg = {.workers = 1, .clock = WEFT_CLOCK_VIRTUAL};
    return weft_run(&cfg, run, NULL) == 0 ? 0 : 1;
}
