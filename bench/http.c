/* SPDX-License-Identifier: MIT */
/*
 * http: the plaintext HTTP/1.1 server of bench/README.md. It is
 * examples/http_server.c itself (keep-alive, pipelining, a strict parser,
 * read deadlines); bench/run starts it with port 0, reads "LISTEN <port>",
 * checks its answers and loads it with `wrk -t1 -c64 -d5s`.
 */
#include "../examples/http_server.c"
