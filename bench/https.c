/* SPDX-License-Identifier: MIT */
/*
 * https: the http benchmark over TLS (bench/README.md). It is
 * examples/http_server.c itself, built with the weft_tls module and
 * started with -T CERT KEY; bench/run makes a throw-away certificate
 * (scripts/test-cert.sh), checks its answers with curl and loads it with
 * `wrk -t1 -c64 -d5s https://...`. Built only with the module.
 */
#include "../examples/http_server.c"
