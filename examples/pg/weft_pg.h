/* SPDX-License-Identifier: MIT */
/*
 * weft_pg: PostgreSQL through libpq's non-blocking API, on weft's public
 * API alone, and a weft_pool of its connections. An example to copy into
 * a program, not a driver: about 300 lines, which include only weft.h and
 * libpq-fe.h.
 *
 * Every call blocks only the calling task: libpq's socket is waited on
 * with weft_fd_wait, so the worker runs other tasks meanwhile. Each call
 * takes an absolute deadline (weft_now() + ...; WEFT_NEVER: none) and is
 * a cancellation point.
 */
#ifndef WEFT_PG_H
#define WEFT_PG_H

#include <libpq-fe.h>

#include "weft.h"

/* A connection: libpq's, and whether a query left it in a state nobody
 * knows (a cancel whose results could not be drained): such a one is
 * given back to its pool as broken. */
typedef struct pg_conn {
    PGconn *pq;
    int broken;
} pg_conn;

/* Connects (PQconnectStart, then PQconnectPoll on weft_fd_wait) and puts
 * the connection in non-blocking mode. Returns 0 and sets *out, or
 * -ECONNREFUSED (the server refused or is not there; libpq says why in
 * PQerrorMessage, gone with the connection), -ETIMEDOUT, -ECANCELED,
 * -ENOMEM. */
int pg_connect(const char *conninfo, weft_time deadline, pg_conn **out);

/* Closes a connection made by pg_connect (PQfinish) and frees it. */
void pg_close(pg_conn *c);

/* Runs one statement with text parameters (PQsendQueryParams; $1, $2 ...
 * in sql) and waits for its result. Returns 0 and sets *out to the result
 * (PGRES_TUPLES_OK or PGRES_COMMAND_OK: PQclear it), or
 *   -EIO         the server refused the statement; *out is its error
 *                result (PQresultErrorMessage; PQclear it), the
 *                connection stays usable;
 *   -ECONNRESET  the connection failed (c->broken is set);
 *   -ETIMEDOUT, -ECANCELED  the deadline passed or the task was cancelled:
 *                the server is told to cancel the statement (PQcancel,
 *                through weft_blocking) and its results are drained, so
 *                the connection can serve the next query; if that does not
 *                finish within a second, c->broken is set;
 *   -ENOMEM.
 * *out is NULL unless said. */
int pg_query(pg_conn *c, const char *sql, int nparams,
             const char *const *params, weft_time deadline, PGresult **out);

/* A pool of connections to one server: a weft_pool whose create is
 * pg_connect, destroy pg_close, and validate a look at the connection's
 * status (a connection the server closed while it was idle is replaced,
 * not handed out). */
typedef struct pg_pool {
    weft_pool *pool;
    char *conninfo;
    int64_t connect_timeout_ns;
} pg_pool;

/* Makes a pool of at most max_size connections to conninfo (copied), each
 * made by pg_connect within connect_timeout_ns. Returns 0 and sets *out,
 * or weft_pool_new's codes. Never blocks: connections are made on demand. */
int pg_pool_new(pg_pool **out, const char *conninfo, int max_size,
                int64_t connect_timeout_ns);

/* Closes the pool (weft_pool_close: waits until every connection is back,
 * or the deadline) and frees it. Returns 0, or weft_pool_close's code
 * (then nothing is freed: call again). */
int pg_pool_free(pg_pool *p, weft_time deadline);

/* Borrows a connection (weft_pool_acquire). Returns its codes. */
int pg_pool_acquire(pg_pool *p, pg_conn **c, weft_time deadline);

/* Gives a connection back: as broken (it is closed, and a new one made in
 * its place when next needed) if a query broke it or its status is not
 * CONNECTION_OK, else as a good one. Returns weft_pool_release's codes. */
int pg_pool_release(pg_pool *p, pg_conn *c);

/* Borrows a connection, runs one statement on it as pg_query does, and
 * gives it back (as broken if the query broke it). Returns pg_query's
 * codes, or weft_pool_acquire's. */
int pg_pool_query(pg_pool *p, const char *sql, int nparams,
                  const char *const *params, weft_time deadline,
                  PGresult **out);

#endif
