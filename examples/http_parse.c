/* SPDX-License-Identifier: MIT */
/*
 * http_parse: see http_parse.h. The head is found first (the first CRLF
 * CRLF within HTTP_MAX_HEADER bytes), then read once from left to right,
 * every byte checked against the grammar of RFC 9112 (the request target
 * only for being visible ASCII): nothing is skipped or guessed, so what
 * this parser takes for the end of a request is what any other strict
 * parser takes for it.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem */
#endif
#include "http_parse.h"

#include <string.h>
#include <strings.h>

static const char OK[] = "HTTP/1.1 200 OK\r\nContent-Length: 13\r\n"
                         "Content-Type: text/plain\r\n\r\nHello, World!";
static const char BAD[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n"
                          "Connection: close\r\n\r\n";
static const char TOO_LARGE[] =
    "HTTP/1.1 413 Content Too Large\r\n"
    "Content-Length: 0\r\nConnection: close\r\n\r\n";
static const char HEADER_LARGE[] =
    "HTTP/1.1 431 Request Header Fields Too Large\r\n"
    "Content-Length: 0\r\nConnection: close\r\n\r\n";
static const char NOT_IMPLEMENTED[] =
    "HTTP/1.1 501 Not Implemented\r\nContent-Length: 0\r\n"
    "Connection: close\r\n\r\n";

_Static_assert(sizeof HEADER_LARGE <= HTTP_ANSWER_MAX, "HTTP_ANSWER_MAX");

/* tchar of RFC 9110: the characters of a method or a field name. */
static bool tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* field-vchar and the whitespace inside a field value: no control
 * character but HTAB (so no NUL, CR, LF), obs-text allowed. */
static bool vchar(unsigned char c)
{
    return c == '\t' || (c >= ' ' && c != 0x7f);
}

static bool ows(char c)
{
    return c == ' ' || c == '\t';
}

/* Is [v, end) `word`, ignoring case? */
static bool is(const char *v, const char *end, const char *word)
{
    size_t n = strlen(word);
    return (size_t)(end - v) == n && !strncasecmp(v, word, n);
}

/* The elements of a list-valued field (1#token): list_next gives the
 * next one in [*v, *vend), OWS trimmed, empty elements skipped; false at
 * the end. */
struct list {
    const char *p, *end;
};

static bool list_next(struct list *l, const char **v, const char **vend)
{
    while (l->p < l->end && (ows(*l->p) || *l->p == ','))
        l->p++;
    if (l->p == l->end)
        return false;
    const char *s = l->p;
    while (l->p < l->end && *l->p != ',')
        l->p++;
    const char *e = l->p;
    while (e > s && ows(e[-1]))
        e--;
    *v = s;
    *vend = e;
    return true;
}

/* What the header fields say about the message. */
struct fields {
    const char *length;     /* the first Content-Length's digits, without
                               leading zeros (NULL: none) */
    size_t length_len;      /* how many */
    size_t body;            /* its value, HTTP_MAX_BODY + 1 if more */
    int hosts;              /* Host fields */
    bool te;                /* a Transfer-Encoding field */
    bool chunked_last;      /* the last coding listed was chunked */
    bool close, keep_alive; /* Connection's options */
};

/* Content-Length = 1*DIGIT, each field the same number. */
static int content_length(struct fields *f, const char *v, const char *end)
{
    if (v == end)
        return HTTP_BAD;
    for (const char *p = v; p < end; p++)
        if (*p < '0' || *p > '9')
            return HTTP_BAD;
    while (end - v > 1 && *v == '0')
        v++;
    size_t n = (size_t)(end - v);
    if (f->length)
        return n == f->length_len && !memcmp(v, f->length, n) ? 0 : HTTP_BAD;
    f->length = v;
    f->length_len = n;
    size_t body = 0;
    for (; v < end && body <= HTTP_MAX_BODY; v++)
        body = body * 10 + (size_t)(*v - '0');
    f->body = v < end || body > HTTP_MAX_BODY ? HTTP_MAX_BODY + 1 : body;
    return 0;
}

static void connection(struct fields *f, const char *v, const char *end)
{
    struct list l = {v, end};
    const char *t, *tend;
    while (list_next(&l, &t, &tend)) {
        if (is(t, tend, "close"))
            f->close = true;
        else if (is(t, tend, "keep-alive"))
            f->keep_alive = true;
    }
}

static void transfer_encoding(struct fields *f, const char *v, const char *end)
{
    struct list l = {v, end};
    const char *t, *tend;
    f->te = true;
    f->chunked_last = false; /* an empty list ends in no coding */
    while (list_next(&l, &t, &tend))
        f->chunked_last = is(t, tend, "chunked");
}

/* One header field, name [p, colon), value [v, end) with OWS trimmed. */
static int field(struct fields *f, const char *p, const char *colon,
                 const char *v, const char *end)
{
    if (is(p, colon, "content-length"))
        return content_length(f, v, end);
    if (is(p, colon, "host"))
        f->hosts++;
    else if (is(p, colon, "connection"))
        connection(f, v, end);
    else if (is(p, colon, "transfer-encoding"))
        transfer_encoding(f, v, end);
    return 0;
}

/* The header lines [p, end), each "name:OWS value OWS CRLF". */
static int fields(struct fields *f, const char *p, const char *end)
{
    while (p < end) {
        const char *colon = p;
        while (colon < end && tchar((unsigned char)*colon))
            colon++;
        if (colon == p || colon == end || *colon != ':')
            return HTTP_BAD; /* no name, space before the colon, obs-fold */
        const char *v = colon + 1, *e;
        while (v < end && ows(*v))
            v++;
        for (e = v; e < end && vchar((unsigned char)*e); e++)
            ;
        if (end - e < 2 || e[0] != '\r' || e[1] != '\n')
            return HTTP_BAD; /* a control character, a bare CR or LF */
        const char *next = e + 2;
        while (e > v && ows(e[-1]))
            e--;
        int rc = field(f, p, colon, v, e);
        if (rc)
            return rc;
        p = next;
    }
    return 0;
}

/* The request line at [p, end): METHOD SP TARGET SP HTTP/1.x CRLF. Returns
 * the minor version (0 or 1) and sets *next to the first header line, or
 * HTTP_BAD. */
static int request_line(const char *p, const char *end, const char **next)
{
    const char *s = p;
    while (p < end && tchar((unsigned char)*p))
        p++;
    if (p == s || p == end || *p++ != ' ')
        return HTTP_BAD;
    s = p;
    while (p < end && (unsigned char)*p > ' ' && (unsigned char)*p < 0x7f)
        p++;
    if (p == s || p == end || *p++ != ' ')
        return HTTP_BAD;
    if (end - p < 10 || memcmp(p, "HTTP/1.", 7) ||
        (p[7] != '0' && p[7] != '1') || p[8] != '\r' || p[9] != '\n')
        return HTTP_BAD;
    *next = p + 10;
    return p[7] - '0';
}

int http_parse(const char *buf, size_t n, struct http_request *r)
{
    size_t look = n < HTTP_MAX_HEADER ? n : HTTP_MAX_HEADER;
    const char *end = memmem(buf, look, "\r\n\r\n", 4);
    if (!end)
        return n >= HTTP_MAX_HEADER ? HTTP_HEADER_LARGE : HTTP_MORE;
    const char *p;
    int minor = request_line(buf, end + 2, &p);
    if (minor < 0)
        return minor;
    struct fields f = {0};
    int rc = fields(&f, p, end + 2);
    if (rc)
        return rc;
    if (f.te) /* RFC 9112, 6.1 and 6.3 */
        return f.length || !minor || !f.chunked_last ? HTTP_BAD
                                                     : HTTP_NOT_IMPLEMENTED;
    if (minor ? f.hosts != 1 : f.hosts > 1) /* RFC 9112, 3.2 */
        return HTTP_BAD;
    if (f.body > HTTP_MAX_BODY)
        return HTTP_TOO_LARGE;
    r->head = (size_t)(end - buf) + 4;
    r->body = f.body;
    r->close = f.close || (!minor && !f.keep_alive);
    return HTTP_OK;
}

/* The answer to http_parse's result st (not HTTP_MORE). */
static const char *answer_for(int st, size_t *len)
{
#define ANSWER(s) (*len = sizeof(s) - 1, (s))
    switch (st) {
    case HTTP_OK:
        return ANSWER(OK);
    case HTTP_TOO_LARGE:
        return ANSWER(TOO_LARGE);
    case HTTP_HEADER_LARGE:
        return ANSWER(HEADER_LARGE);
    case HTTP_NOT_IMPLEMENTED:
        return ANSWER(NOT_IMPLEMENTED);
    default:
        return ANSWER(BAD);
    }
#undef ANSWER
}

/* Discards what arrived of the body being skipped. Returns true when it
 * is all gone. */
static bool skip_body(struct http_conn *c)
{
    size_t k = c->have - c->used < c->skip ? c->have - c->used : c->skip;
    c->used += k;
    c->skip -= k;
    if (c->skip)
        return false;
    c->done++;
    return true;
}

size_t http_answer(struct http_conn *c, char *out, size_t cap)
{
    size_t nout = 0;
    c->full = false;
    while (!c->close && (!c->skip || skip_body(c)) && c->used < c->have) {
        struct http_request r;
        int st = http_parse(c->in + c->used, c->have - c->used, &r);
        if (st == HTTP_MORE)
            break;
        size_t len;
        const char *a = answer_for(st, &len);
        if (cap - nout < len) {
            c->full = true;
            return nout;
        }
        memcpy(out + nout, a, len);
        nout += len;
        if (st != HTTP_OK) {
            c->close = true;
            break;
        }
        c->used += r.head;
        c->skip = r.body;
        c->close = r.close;
        if (!r.body)
            c->done++;
    }
    memmove(c->in, c->in + c->used, c->have - c->used);
    c->have -= c->used;
    c->used = 0;
    return nout;
}
