/* SPDX-License-Identifier: MIT */
/*
 * weft_pg: PostgreSQL through libpq's non-blocking API on weft (see
 * weft_pg.h). libpq never blocks here: it is asked to do what it can, and
 * when it cannot go on, the task waits on libpq's socket with
 * weft_fd_wait. The one blocking libpq call, PQcancel, runs on weft's
 * blocking pool.
 */
#include "weft_pg.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int pg_connect(const char *conninfo, weft_time deadline, pg_conn **out)
{
    *out = NULL;
    pg_conn *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->pq = PQconnectStart(conninfo);
    if (!c->pq) {
        free(c);
        return -ENOMEM;
    }
    int rc = PQstatus(c->pq) == CONNECTION_BAD ? -ECONNREFUSED : 0;
    /* Right after PQconnectStart, libpq waits to write (its docs). */
    PostgresPollingStatusType st = PGRES_POLLING_WRITING;
    while (rc == 0 && st != PGRES_POLLING_OK) {
        /* The socket may change from one step to the next (libpq tries
         * the next host or address): read it again each time. */
        int fd = PQsocket(c->pq);
        if (st == PGRES_POLLING_FAILED || fd < 0) {
            rc = -ECONNREFUSED;
            break;
        }
        int ev = st == PGRES_POLLING_READING ? WEFT_IO_READ : WEFT_IO_WRITE;
        rc = weft_fd_wait(fd, ev, deadline);
        if (rc == 0)
            st = PQconnectPoll(c->pq);
    }
    if (rc == 0 && PQsetnonblocking(c->pq, 1) != 0)
        rc = -ECONNREFUSED;
    if (rc != 0) {
        pg_close(c);
        return rc;
    }
    *out = c;
    return 0;
}

void pg_close(pg_conn *c)
{
    if (!c)
        return;
    /* libpq has no close hook: tell weft the socket is going away. */
    int fd = PQsocket(c->pq);
    if (fd >= 0)
        weft_fd_forget(fd);
    PQfinish(c->pq);
    free(c);
}

/* The connection failed: -ECONNRESET, and it is not to be used again. */
static int pg_lost(pg_conn *c)
{
    c->broken = 1;
    return -ECONNRESET;
}

static int pg_wait(pg_conn *c, int events, weft_time deadline)
{
    int fd = PQsocket(c->pq);
    return fd < 0 ? pg_lost(c) : weft_fd_wait(fd, events, deadline);
}

/* Sends what libpq holds, then reads results until PQgetResult says there
 * are no more. Keeps the first error result in *res (else the last one);
 * frees the others. Returns 0, -ECONNRESET, or a wait's code. */
static int pg_collect(pg_conn *c, weft_time deadline, PGresult **res)
{
    for (;;) {
        int f;
        while ((f = PQflush(c->pq)) == 1) {
            /* Both: the server may be waiting for us to read (libpq's
             * docs: consume input when readable, then flush again). */
            int rc = pg_wait(c, WEFT_IO_READ | WEFT_IO_WRITE, deadline);
            if (rc != 0)
                return rc;
            if (!PQconsumeInput(c->pq))
                return pg_lost(c);
        }
        if (f < 0)
            return pg_lost(c);
        while (PQisBusy(c->pq)) {
            int rc = pg_wait(c, WEFT_IO_READ, deadline);
            if (rc != 0)
                return rc;
            if (!PQconsumeInput(c->pq))
                return pg_lost(c);
        }
        PGresult *r = PQgetResult(c->pq);
        if (!r)
            return PQstatus(c->pq) == CONNECTION_OK ? 0 : pg_lost(c);
        if (!*res || (PQresultStatus(*res) != PGRES_FATAL_ERROR &&
                      PQresultStatus(r) == PGRES_FATAL_ERROR)) {
            PQclear(*res);
            *res = r;
        } else {
            PQclear(r);
        }
    }
}

/* Runs on a thread of weft's blocking pool: PQcancel connects to the
 * server and waits for it to take the request. Frees its argument. */
static int pg_cancel_call(void *arg)
{
    PGcancel *k = arg;
    char err[256];
    int ok = PQcancel(k, err, sizeof(err));
    PQfreeCancel(k);
    return ok ? 0 : -EIO;
}

/* After a deadline or a cancel: asks the server to cancel the statement,
 * then drains its results (within a second), so that the connection can
 * serve the next query; if that fails, the connection is marked broken.
 * A shielded scope lets it block although the task is cancelled; it has no
 * deadline, so the blocking call cannot be abandoned (its argument is the
 * call's to free either way). */
static void pg_cancel_and_drain(pg_conn *c)
{
    weft_scope *s;
    if (weft_scope_open(&s, &(weft_scope_opts){.shield = 1}) != 0) {
        c->broken = 1;
        return;
    }
    PGcancel *k = PQgetCancel(c->pq);
    int rc = k ? weft_blocking(pg_cancel_call, k) : -ENOMEM;
    PGresult *junk = NULL;
    if (rc == 0)
        rc = pg_collect(c, weft_now() + WEFT_SEC, &junk);
    PQclear(junk);
    if (rc != 0)
        c->broken = 1;
    weft_scope_join(s);
    weft_scope_free(s);
}

int pg_query(pg_conn *c, const char *sql, int nparams,
             const char *const *params, weft_time deadline, PGresult **out)
{
    *out = NULL;
    if (c->broken)
        return -ECONNRESET;
    int rc = weft_cancelled() ? -ECANCELED : 0;
    if (rc == 0 && weft_now() >= deadline)
        rc = -ETIMEDOUT;
    if (rc != 0)
        return rc; /* nothing sent: nothing to cancel */
    if (!PQsendQueryParams(c->pq, sql, nparams, NULL, params, NULL, NULL, 0))
        return PQstatus(c->pq) == CONNECTION_OK ? -ENOMEM : pg_lost(c);
    PGresult *res = NULL;
    rc = pg_collect(c, deadline, &res);
    if (rc == -ETIMEDOUT || rc == -ECANCELED) {
        PQclear(res);
        pg_cancel_and_drain(c);
        return rc;
    }
    if (rc == 0 && !res)
        rc = -EIO; /* an empty statement */
    if (rc == 0) {
        ExecStatusType st = PQresultStatus(res);
        if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK)
            rc = -EIO;
    }
    if (rc != 0 && rc != -EIO) {
        PQclear(res);
        return rc;
    }
    *out = res;
    return rc;
}

/* ---- the pool ---- */

static int pg_pool_create(void *ctx, void **res)
{
    pg_pool *p = ctx;
    pg_conn *c;
    int rc = pg_connect(p->conninfo, weft_now() + p->connect_timeout_ns, &c);
    if (rc == 0)
        *res = c;
    return rc;
}

static void pg_pool_destroy(void *ctx, void *res)
{
    (void)ctx;
    pg_close(res);
}

/* An idle connection the server closed (a restart, an idle timeout) still
 * says CONNECTION_OK until libpq reads from it: read what is there first. */
static int pg_pool_validate(void *ctx, void *res)
{
    (void)ctx;
    pg_conn *c = res;
    if (c->broken || !PQconsumeInput(c->pq))
        return -1;
    return PQstatus(c->pq) == CONNECTION_OK &&
                   PQtransactionStatus(c->pq) == PQTRANS_IDLE
               ? 0
               : -1;
}

int pg_pool_new(pg_pool **out, const char *conninfo, int max_size,
                int64_t connect_timeout_ns)
{
    *out = NULL;
    pg_pool *p = calloc(1, sizeof(*p));
    if (!p || !(p->conninfo = strdup(conninfo))) {
        free(p);
        return -ENOMEM;
    }
    p->connect_timeout_ns = connect_timeout_ns;
    weft_pool_opts opts = {.create = pg_pool_create,
                           .destroy = pg_pool_destroy,
                           .validate = pg_pool_validate,
                           .ctx = p,
                           .max_size = max_size,
                           .name = "pg"};
    int rc = weft_pool_new(&p->pool, &opts);
    if (rc != 0) {
        free(p->conninfo);
        free(p);
        return rc;
    }
    *out = p;
    return 0;
}

int pg_pool_free(pg_pool *p, weft_time deadline)
{
    int rc = weft_pool_close(p->pool, deadline);
    if (rc != 0)
        return rc;
    rc = weft_pool_free(p->pool);
    if (rc != 0)
        return rc;
    free(p->conninfo);
    free(p);
    return 0;
}

int pg_pool_acquire(pg_pool *p, pg_conn **c, weft_time deadline)
{
    void *res;
    int rc = weft_pool_acquire(p->pool, &res, deadline);
    *c = rc == 0 ? res : NULL;
    return rc;
}

int pg_pool_release(pg_pool *p, pg_conn *c)
{
    if (c->broken || PQstatus(c->pq) != CONNECTION_OK)
        return weft_pool_release_broken(p->pool, c);
    return weft_pool_release(p->pool, c);
}

int pg_pool_query(pg_pool *p, const char *sql, int nparams,
                  const char *const *params, weft_time deadline, PGresult **out)
{
    *out = NULL;
    pg_conn *c;
    int rc = pg_pool_acquire(p, &c, deadline);
    if (rc != 0)
        return rc;
    rc = pg_query(c, sql, nparams, params, deadline, out);
    pg_pool_release(p, c);
    return rc;
}
