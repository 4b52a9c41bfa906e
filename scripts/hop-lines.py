#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""How many cache lines a message touches in bench/ring.

    scripts/hop-lines.py [BENCH_RING] [HOPS]

Runs BENCH_RING (default build/bench/bench_ring, as bench/run builds it)
with HOPS hops (default 3000: 1,000 for the asks that start the ring, then
two rounds and more of tells) under valgrind's lackey, which writes every
load and store, and counts the distinct 64-byte lines that the 1,000 hops
from the 1,500th call of the behaviour (`hop`) onward touched: those of
the actors (a line that at most four hops touched: each actor's struct,
its task's struct and stack, its state), per hop, and those that all hops
share (the worker's, the root's), which stay in the cache. In a ring of
1,000 actors the first are what a hop has to bring in.

The counts are what the code touches, not what the caches miss: they do
not depend on the machine or its load. Valgrind loads a PIE program at
0x108000, which is where the behaviour's address comes from.
"""
import collections
import os
import subprocess
import sys
import tempfile

LINE = 64
PIE_BASE = 0x108000  # where valgrind's amd64 loader puts a PIE program
FIRST, COUNT = 1500, 1000  # the calls of the behaviour counted


def hop_address(binary):
    """The run-time address of the behaviour's first instruction."""
    out = subprocess.run(["nm", binary], capture_output=True, text=True,
                         check=True).stdout
    for row in out.splitlines():
        f = row.split()
        if len(f) == 3 and f[2] == "hop":
            return PIE_BASE + int(f[0], 16)
    sys.exit(f"{binary}: no symbol 'hop' (not bench_ring?)")


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else "build/bench/bench_ring"
    hops = int(sys.argv[2]) if len(sys.argv) > 2 else 3000
    entry = "I  %08x," % hop_address(binary)
    with tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "lackey.log")
        subprocess.run(["valgrind", "--tool=lackey", "--trace-mem=yes",
                        "--log-file=" + log, binary, str(hops)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       check=True)
        with open(log) as f:
            rows = f.read().split("\n")
    calls = [i for i, r in enumerate(rows) if r.startswith(entry)]
    if len(calls) <= FIRST + COUNT:
        sys.exit(f"the behaviour ran {len(calls)} times, {FIRST + COUNT + 1} "
                 f"are needed: give more HOPS (the 1,000 asks count too)")
    # For each line, the hops (from one call of the behaviour to the next)
    # that touched it.
    hops_of = collections.defaultdict(set)
    for h in range(FIRST, FIRST + COUNT):
        for r in rows[calls[h]:calls[h + 1]]:
            f = r.split()
            if len(f) < 2 or f[0] not in ("L", "S", "M"):
                continue
            hops_of[int(f[1].split(",")[0], 16) // LINE].add(h)
    n = COUNT
    # An actor's lines are touched by the hop that brings it a message
    # and the one it sends on (two in a row); more than SHARED hops: a
    # line every actor uses (the worker's, the scheduler's, the root's).
    SHARED = 4
    own = sum(1 for hs in hops_of.values() if len(hs) <= SHARED)
    shared = len(hops_of) - own
    print(f"lines of the actors: {own / n:.2f} a hop")
    print(f"lines all hops share: {shared} (over {n} hops)")
    print(f"in all: {len(hops_of) / n:.2f} distinct lines a hop")


if __name__ == "__main__":
    main()
