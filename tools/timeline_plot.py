#!/usr/bin/env python3
"""The time line of an `iotest run`: busy, wait and idle per rank over
time, and the stage rates summed over the ranks, as two PNG files
(640 x 480) from a report's "timeline" section.

    .venv/bin/python tools/timeline_plot.py RUN_REPORT.json --plots=DIR
"""
import os
import sys

import numpy as np

from report_tool import plot_main

COLOURS = {"busy": "tab:green", "wait": "tab:orange", "idle": "lightgrey"}
MB = 1e6  # as the reports: MB = 10^6 bytes


def ranks(report):
    return sorted(report["timeline"]["ranks"], key=lambda r: r["rank"])


def length(report):
    """Intervals in the longest rank: shorter ones are padded to it."""
    return max((len(r.get("busy_s", [])) for r in ranks(report)), default=0)


def rows(report):
    """Per rank (in rank order), [(busy, wait, idle)] as fractions of an interval."""
    interval, n = report["timeline"]["interval_s"], length(report)
    out = []
    for r in ranks(report):
        busy, wait = r.get("busy_s", []), r.get("wait_s", [])
        row = []
        for i in range(n):
            b = busy[i] if i < len(busy) else 0.0
            w = wait[i] if i < len(wait) else 0.0
            # Timing jitter can make busy + wait overshoot the interval.
            row.append((b / interval, w / interval, max(0.0, interval - b - w) / interval))
        out.append(row)
    return out


def rates(report):
    """(interval start times s, visibilities/s, bytes written/s, bytes sent/s),
    each summed over the ranks."""
    t, n = report["timeline"], length(report)
    times = t.get("start_s", 0.0) + t["interval_s"] * np.arange(n)
    sums = []
    for key in ("visibilities", "bytes_written", "bytes_sent"):
        total = np.zeros(n)
        for r in ranks(report):
            values = np.asarray(r.get(key, []), dtype=float)[:n]
            total[:len(values)] += values
        sums.append(total / t["interval_s"])
    return (times, *sums)


def plot(report, folder):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    os.makedirs(folder, exist_ok=True)
    t = report["timeline"]
    interval, start = t["interval_s"], t.get("start_s", 0.0)
    paths = [os.path.join(folder, "timeline_ranks.png"), os.path.join(folder, "timeline_rates.png")]

    fig, ax = plt.subplots(figsize=(6.4, 4.8), dpi=100)
    labels = [f"rank {r['rank']} {r.get('role', '')}".rstrip() for r in ranks(report)]
    for y, row in enumerate(rows(report)):
        segments = {name: [] for name in COLOURS}
        for i, fractions in enumerate(row):
            # Scale an overshooting interval down so it stays inside its slot.
            scale = interval / max(1.0, sum(fractions))
            left = start + i * interval
            for name, fraction in zip(COLOURS, fractions):
                segments[name].append((left, fraction * scale))
                left += fraction * scale
        for name, colour in COLOURS.items():
            ax.broken_barh(segments[name], (y - 0.4, 0.8), facecolors=colour,
                           label=name if y == 0 else None)
    ax.set_yticks(range(len(labels)), labels, fontsize=8 if len(labels) < 24 else 5)
    ax.invert_yaxis()  # rank 0 on top
    ax.set_xlabel("time since the run's start (s)")
    ax.set_title("iotest run: time line per rank")
    # Under the axes: inside, it would hide the top rank's bars.
    ax.legend(fontsize=8, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.12))
    fig.tight_layout()
    fig.savefig(paths[0])
    plt.close(fig)

    times, *values = rates(report)
    edges = np.append(times, start + interval * len(times))
    fig, axes = plt.subplots(3, 1, sharex=True, figsize=(6.4, 4.8), dpi=100)
    for ax, y, (label, colour) in zip(axes, values, (
            ("visibilities/s", "tab:blue"), ("MB/s written", "tab:red"),
            ("MB/s sent", "tab:purple"))):
        ax.stairs(y if label.startswith("vis") else y / MB, edges, color=colour)
        ax.set_ylabel(label, fontsize=8)
        ax.grid(True, lw=0.3)
    axes[0].set_title("iotest run: stage rates over time, summed over ranks")
    axes[-1].set_xlabel("time since the run's start (s)")
    fig.tight_layout()
    fig.savefig(paths[1])
    plt.close(fig)
    return paths


def main(argv=None):
    return plot_main(argv, "timeline_plot", __doc__, "`iotest run`", "timeline",
                     "the report has no time line (`iotest run` writes one)", plot)


if __name__ == "__main__":
    sys.exit(main())
