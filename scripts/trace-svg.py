#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Draws a weft trace (WEFT_TRACE=file, Chrome's Trace Event Format) as an
SVG: one row per worker, each run of a task a coloured box (the same
colour for the same task name), the names of the tasks that ran near one
moment written above their boxes, wakes as ticks under the row, and a
time axis in milliseconds. The standard library only, so that a picture
of a trace can be made where no browser runs.

    scripts/trace-svg.py TRACE.json OUT.svg [--from MS] [--to MS]
                         [--width PX] [--title TEXT]

Time runs left to right, linearly; a run too short to see is drawn 2 px
wide. --from and --to draw only that window (ms from the trace's start).
"""
import argparse
import colorsys
import hashlib
import json
import sys
from xml.sax.saxutils import escape

ROW_H = 34      # a worker's row: its boxes
LABEL_H = 13    # one line of names above a row
LANES = 4       # lines of names above a row
CHAR_W = 6.2    # about how wide a character of the names is
LEFT = 84       # room for the row names
RIGHT = 24
TOP = 40
MIN_W = 2.0     # the narrowest box drawn
CLUSTER_PX = 7  # runs closer than this share a label


def colour(name):
    """A stable, light colour for a task name."""
    h = int(hashlib.md5(name.encode()).hexdigest()[:6], 16) / 0xFFFFFF
    r, g, b = colorsys.hls_to_rgb(h, 0.62, 0.55)
    return "#%02x%02x%02x" % (int(r * 255), int(g * 255), int(b * 255))


def nice_step(span, ticks=8):
    """A round step (1, 2 or 5 times a power of ten) giving about `ticks`
    ticks over span."""
    raw = span / ticks
    p = 10 ** len(str(int(raw))) / 10 if raw >= 1 else 1.0
    while p > raw:
        p /= 10
    for m in (1, 2, 5, 10):
        if p * m >= raw:
            return p * m
    return p * 10


def load(path):
    with open(path) as f:
        d = json.load(f)
    ev = d["traceEvents"]
    workers = {e["tid"]: e["args"]["name"] for e in ev
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    process = next((e["args"]["name"] for e in ev
                    if e.get("ph") == "M" and e.get("name") == "process_name"),
                   "weft")
    slices = [e for e in ev if e.get("ph") == "X"]
    wakes = [e for e in ev if e.get("ph") == "i" and e.get("cat") == "wake"]
    return process, workers, slices, wakes


def fits(name, w):
    """Whether a box w px wide has room for its name inside."""
    return CHAR_W * len(name) + 6 <= w


def clusters(row, x_of):
    """Runs of one row, in time order, grouped when their boxes are less
    than CLUSTER_PX apart: [(x0, x1, [names])]."""
    out = []
    for e in sorted(row, key=lambda e: e["ts"]):
        x0 = x_of(e["ts"])
        x1 = max(x_of(e["ts"] + e["dur"]), x0 + MIN_W)
        if fits(e["name"], x1 - x0):
            continue  # named inside its box
        if out and x0 - out[-1][1] < CLUSTER_PX:
            c = out[-1]
            out[-1] = (c[0], max(c[1], x1),
                       c[2] + ([e["name"]] if e["name"] not in c[2] else []))
        else:
            out.append((x0, x1, [e["name"]]))
    return out


def draw(process, workers, slices, wakes, t_from, t_to, width, title):
    if t_to <= t_from:
        t_to = t_from + 1.0
    plot_w = width - LEFT - RIGHT
    def x_of(us):
        return LEFT + (us / 1000.0 - t_from) / (t_to - t_from) * plot_w

    tids = sorted(workers)
    row_pitch = LANES * LABEL_H + ROW_H + 14
    height = TOP + len(tids) * row_pitch + 46
    o = []
    o.append('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
             'font-family="sans-serif" font-size="11">' % (width, height))
    o.append('<rect width="100%" height="100%" fill="white"/>')
    o.append('<text x="%d" y="20" font-size="14" font-weight="bold">%s</text>'
             % (LEFT, escape(title or process)))
    shown = [e for e in slices
             if e["ts"] / 1000.0 <= t_to and (e["ts"] + e["dur"]) / 1000.0 >= t_from]
    for i, tid in enumerate(tids):
        y = TOP + i * row_pitch + LANES * LABEL_H
        o.append('<text x="6" y="%.1f">%s</text>'
                 % (y + ROW_H / 2 + 4, escape(workers[tid])))
        o.append('<rect x="%d" y="%.1f" width="%d" height="%d" fill="#f4f4f4" '
                 'stroke="#ddd"/>' % (LEFT, y, plot_w, ROW_H))
        row = [e for e in shown if e["tid"] == tid]
        for e in row:
            x0 = max(x_of(e["ts"]), LEFT)
            w = max(x_of(e["ts"] + e["dur"]) - x0, MIN_W)
            tip = "%s: %.3f us, then %s" % (e["name"], e["dur"],
                                            e["args"].get("then", "?"))
            o.append('<rect x="%.2f" y="%.1f" width="%.2f" height="%d" '
                     'fill="%s" stroke="#555" stroke-width="0.4">'
                     '<title>%s</title></rect>'
                     % (x0, y + 3, w, ROW_H - 6, colour(e["name"]), escape(tip)))
            if fits(e["name"], w):
                o.append('<text x="%.1f" y="%.1f">%s</text>'
                         % (x0 + 3, y + ROW_H / 2 + 4, escape(e["name"])))
        ends = [0.0] * LANES  # where each line of names is taken up to
        for x0, x1, names in clusters(row, x_of):
            label = ", ".join(names)
            w = CHAR_W * len(label) + 4
            tx = min(x0 + 2, LEFT + plot_w - w)  # kept inside the plot
            free = [k for k in range(LANES) if ends[k] <= tx]
            lane = free[-1] if free else min(range(LANES), key=ends.__getitem__)
            ends[lane] = tx + w
            ly = y - (LANES - 1 - lane) * LABEL_H - 3
            o.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" '
                     'stroke="#999" stroke-width="0.5"/>'
                     % (x0, ly + 2, x0, y + 3))
            o.append('<text x="%.1f" y="%.1f">%s</text>'
                     % (tx, ly, escape(label)))
        for e in wakes:
            if e["tid"] != tid or not (t_from <= e["ts"] / 1000.0 <= t_to):
                continue
            x = x_of(e["ts"])
            o.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" '
                     'stroke="#c0392b" stroke-width="1"><title>%s</title>'
                     '</line>' % (x, y + ROW_H, x, y + ROW_H + 6,
                                  escape(e["name"])))
    # the time axis
    ay = TOP + len(tids) * row_pitch + 4
    o.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>'
             % (LEFT, ay, LEFT + plot_w, ay))
    step = nice_step(t_to - t_from)
    t = (int(t_from / step) + (1 if t_from % step else 0)) * step
    while t <= t_to + 1e-9:
        x = x_of(t * 1000.0)
        o.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#333"/>'
                 % (x, ay, x, ay + 5))
        o.append('<text x="%.1f" y="%d" text-anchor="middle">%g</text>'
                 % (x, ay + 17, round(t, 6)))
        t += step
    o.append('<text x="%d" y="%d" text-anchor="end">ms</text>'
             % (LEFT + plot_w, ay + 32))
    o.append('<text x="%d" y="%d" fill="#c0392b">| wake</text>'
             % (LEFT, ay + 32))
    o.append('</svg>')
    return "\n".join(o) + "\n"


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("out")
    ap.add_argument("--from", dest="t_from", type=float, default=None)
    ap.add_argument("--to", dest="t_to", type=float, default=None)
    ap.add_argument("--width", type=int, default=1000)
    ap.add_argument("--title", default=None)
    a = ap.parse_args(argv)
    process, workers, slices, wakes = load(a.trace)
    if not workers:
        print("trace-svg: no workers in %s" % a.trace, file=sys.stderr)
        return 1
    end = max([(e["ts"] + e["dur"]) / 1000.0 for e in slices] + [0.001])
    t_from = a.t_from if a.t_from is not None else 0.0
    t_to = a.t_to if a.t_to is not None else end
    svg = draw(process, workers, slices, wakes, t_from, t_to, a.width, a.title)
    with open(a.out, "w") as f:
        f.write(svg)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
