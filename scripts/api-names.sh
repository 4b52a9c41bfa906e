#!/bin/sh
# SPDX-License-Identifier: MIT
# Checks that every public name of include/weft.h, include/weft_curl.h,
# include/weft_tls.h and include/weft_nats.h follows docs/api-conventions.md (the try form,
# deadlines last and their _until and _for forms, constructors,
# destructors, statistics getters,
# joins, WEFT_ and weft_ spelling, enum prefixes such as WEFT_OP_ for the
# select ops, the deprecated block). The parser and the rules are in
# scripts/api-names.py (python3).
#   scripts/api-names.sh              check the public headers
#   scripts/api-names.sh HEADER...    check these headers instead
#   scripts/api-names.sh --self-test  plant bad declarations: each must
#                                     be flagged, a good header must pass
# Exits 0 if every name follows the rules, else 1 with one line per name.
set -eu
exec python3 "$(dirname "$0")/api-names.py" "$@"
