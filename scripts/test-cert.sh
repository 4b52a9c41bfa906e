#!/bin/sh
# SPDX-License-Identifier: MIT
# Makes a self-signed certificate for the test HTTPS server
# (test/fault_server.h): CN=127.0.0.1, subjectAltName IP:127.0.0.1 and
# DNS:localhost, RSA 2048, valid two days.
#
#   scripts/test-cert.sh DIR
#
# Writes DIR/cert.pem and DIR/key.pem (DIR is created if need be). A
# client trusts it with its CA file set to DIR/cert.pem (curl --cacert).
# Needs the openssl command (scripts/deps.sh build installs it).
set -eu
if [ $# -ne 1 ]; then
    echo "usage: scripts/test-cert.sh DIR" >&2
    exit 2
fi
mkdir -p "$1"
if ! log=$(openssl req -x509 -newkey rsa:2048 -nodes -days 2 \
    -subj /CN=127.0.0.1 \
    -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" \
    -keyout "$1/key.pem" -out "$1/cert.pem" 2>&1); then
    echo "$log" >&2
    echo "test-cert.sh: openssl req failed" >&2
    exit 1
fi
