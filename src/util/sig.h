/* SPDX-License-Identifier: MIT */
/*
 * The util layer's raw writes to stderr (util.c), for the code that
 * reports from anywhere: a fault handler, a failed assert.
 */
#ifndef WEFT_UTIL_SIG_H
#define WEFT_UTIL_SIG_H

/* Writes s, then a number, to stderr without stdio, locks or allocation,
 * and under TSan without its interceptors (raw system calls): for a fault
 * handler or a failed assert, wherever they run. */
void weft__sig_write(const char *s);
void weft__sig_write_num(unsigned long v);

#endif
