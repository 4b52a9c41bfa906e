/* SPDX-License-Identifier: MIT */
/*
 * The util layer's JSON escaping (util.c), for the writers of JSON: the
 * task dump, the statistics, the trace.
 */
#ifndef WEFT_UTIL_JSON_H
#define WEFT_UTIL_JSON_H

#include <stddef.h>

/* The byte c as it stands inside a JSON string: itself, or escaped (a
 * quote or backslash after a backslash; a control character or DEL as
 * \u00XX). Writes it to out without a terminator and returns its length
 * (1, 2 or 6). */
size_t weft__json_char(unsigned char c, char out[6]);

#endif
