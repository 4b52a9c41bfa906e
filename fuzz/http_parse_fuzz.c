/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: http_parse (examples/http_parse.c) on any bytes.
 * Besides what ASan and UBSan catch, it checks what the parser promises:
 * a result is one of the documented ones; HTTP_MORE only while no head
 * end is within reach; an accepted head ends with the first CRLF CRLF,
 * within HTTP_MAX_HEADER bytes, holds no NUL and no CR or LF outside a
 * CRLF, and alone parses the same (nothing after it counts); a decision
 * once made does not change as more bytes arrive. scripts/fuzz.sh builds
 * and runs it.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../examples/http_parse.c"

#define CHECK(c)                                                               \
    do {                                                                       \
        if (!(c))                                                              \
            abort();                                                           \
    } while (0)

static bool known(int st)
{
    return st == HTTP_MORE || st == HTTP_OK || st == HTTP_BAD ||
           st == HTTP_TOO_LARGE || st == HTTP_HEADER_LARGE ||
           st == HTTP_NOT_IMPLEMENTED;
}

/* Every CR is followed by LF, every LF follows a CR, no NUL. */
static bool strict_lines(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i] == 0 || (p[i] == '\r' && (i + 1 == n || p[i + 1] != '\n')) ||
            (p[i] == '\n' && (i == 0 || p[i - 1] != '\r')))
            return false;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data;
    struct http_request r;
    int st = http_parse(buf, size, &r);
    CHECK(known(st));
    size_t look = size < HTTP_MAX_HEADER ? size : HTTP_MAX_HEADER;
    const char *end = memmem(buf, look, "\r\n\r\n", 4);
    if (st == HTTP_MORE)
        CHECK(!end && size < HTTP_MAX_HEADER);
    if (st == HTTP_HEADER_LARGE)
        CHECK(!end && size >= HTTP_MAX_HEADER);
    if (st != HTTP_MORE && st != HTTP_HEADER_LARGE)
        CHECK(end != NULL);
    if (st == HTTP_OK) {
        CHECK(r.head == (size_t)(end - buf) + 4);
        CHECK(r.head <= size && r.head <= HTTP_MAX_HEADER);
        CHECK(r.body <= HTTP_MAX_BODY);
        CHECK(strict_lines(buf, r.head));
        /* The head alone says the same. */
        char *copy = malloc(r.head);
        CHECK(copy);
        memcpy(copy, buf, r.head);
        struct http_request r2;
        CHECK(http_parse(copy, r.head, &r2) == HTTP_OK);
        CHECK(r2.head == r.head && r2.body == r.body && r2.close == r.close);
        free(copy);
    }
    /* Decided with fewer bytes: decided the same way. */
    if (end && size > 0) {
        size_t head = (size_t)(end - buf) + 4;
        struct http_request r3;
        int st3 = http_parse(buf, head, &r3);
        CHECK(st3 == st);
        if (st == HTTP_OK)
            CHECK(r3.head == r.head && r3.body == r.body &&
                  r3.close == r.close);
        if (head > 1)
            CHECK(http_parse(buf, head - 1, &r3) == HTTP_MORE);
    }
    return 0;
}
