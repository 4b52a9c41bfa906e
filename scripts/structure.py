#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Measures the shape of src/, for reviews of structural changes.

    scripts/structure.py [-v] [--check] [ROOT]

Prints, for the library's own sources (src/ without the optional modules):
- functions: how many, their length in lines (body, between the braces
  at column 0) as median, p90 and max, and those over 60 lines, each
  named, with "(says why)" when the comment above it mentions "60 lines"
  (-v: the 20 longest);
- headers: the lines of private headers (src/**/*.h) each .c file pulls
  in, through every include it makes, directly or not: mean and max
  (-v: per file);
- waits: the calls outside src/wait/ and src/sched/ that assemble a wait
  or claim a waiter by hand (the wait layer's internals), which should be
  none;
- select: the operations weft_select takes (weft_op in include/weft.h).
Reads the sources as text; builds nothing. --check (CI's headers stage)
exits 1 if a function is over 60 lines without a comment saying why.
"""
import glob
import os
import re
import statistics
import sys

verbose = "-v" in sys.argv[1:]
check = "--check" in sys.argv[1:]
args = [a for a in sys.argv[1:] if a not in ("-v", "--check")]
root = args[0] if args else os.path.join(os.path.dirname(__file__), "..")
src = os.path.join(root, "src")
every = sorted(glob.glob(os.path.join(src, "*.c")) +
               glob.glob(os.path.join(src, "*", "*.c")))
units = [f for f in every if os.sep + "curl" + os.sep not in f]


def rel(f):
    return os.path.relpath(f, src)


# ---- functions (the optional modules too) ----
funcs = []
for f in every:
    lines = open(f).read().split("\n")
    i = 0
    while i < len(lines):
        if lines[i].startswith("{") and i > 0:
            j = i - 1
            while j > 0 and "(" not in lines[j]:
                j -= 1
            m = re.search(r"(\w+)\s*\(", lines[j])
            k = i + 1
            while k < len(lines) and not lines[k].startswith("}"):
                k += 1
            why = " ".join(lines[max(0, j - 6):j])
            why = " (says why)" if "60 lines" in why else ""
            funcs.append((k - i - 1, rel(f), (m.group(1) if m else "?") + why))
            i = k
        i += 1
n = sorted(x[0] for x in funcs)
long_ = sorted((x for x in funcs if x[0] > 60), reverse=True)
print(f"functions: {len(n)}, lines median {statistics.median(n):g}, "
      f"p90 {n[int(len(n) * 0.9)]}, max {n[-1]}, over 60: {len(long_)}")
for x in (sorted(funcs, reverse=True)[:20] if verbose else long_):
    print(f"  {x[0]:4d} {x[1]} {x[2]}")


# ---- headers ----
def includes(path):
    out = []
    for line in open(path):
        m = re.match(r'\s*#\s*include\s*"([^"]+)"', line)
        if not m:
            continue
        for c in (os.path.join(os.path.dirname(path), m.group(1)),
                  os.path.join(src, m.group(1))):
            if os.path.isfile(c):
                out.append(os.path.normpath(c))
                break
    return out


per = {}
for f in units:
    seen, todo = set(), includes(f)
    while todo:
        h = todo.pop()
        if h not in seen:
            seen.add(h)
            todo += includes(h)
    per[rel(f)] = sum(open(h).read().count("\n") for h in seen)
print(f"headers: a .c file pulls in {round(sum(per.values()) / len(per))} "
      f"lines of private headers on average, at most {max(per.values())}")
if verbose:
    for k, v in sorted(per.items(), key=lambda x: -x[1]):
        print(f"  {v:5d} {k}")

# ---- waits assembled by hand ----
# The same list as scripts/layers.sh's parking check, which CI runs.
internals = re.compile(r"\bweft__(wait_arm|wait_block|park_prepare|"
                       r"park_commit|wake_claim)\s*\(")
sites = []
for f in units:
    r = rel(f)
    if r.startswith(("wait" + os.sep, "sched" + os.sep)):
        continue
    for no, line in enumerate(open(f), 1):
        if internals.search(line) and not line.lstrip().startswith(("*", "/*")):
            sites.append(f"{r}:{no}: {line.strip()}")
print(f"waits: {len(sites)} call(s) outside the wait layer to its internals")
for s in sites:
    print("  " + s)

# ---- select ----
hdr = open(os.path.join(root, "include", "weft.h")).read()
m = re.search(r"typedef enum weft_op \{(.*?)\}", hdr, re.S)
ops = re.findall(r"\b(WEFT_OP_\w+)\s*=", m.group(1)) if m else []
print(f"select: {len(ops)} operations: {' '.join(o[8:] for o in ops)}")

if check:
    bad = [x for x in long_ if not x[2].endswith("(says why)")]
    for x in bad:
        print(f"structure: {x[1]} {x[2]} is {x[0]} lines: split it, or say "
              "in the comment above it why it cannot be (\"60 lines\")",
              file=sys.stderr)
    sys.exit(1 if bad else 0)
