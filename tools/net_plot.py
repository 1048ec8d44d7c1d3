#!/usr/bin/env python3
"""The `iotest net` curves (issue 12): latency and bandwidth against
message size, one line per transport and pair, log-log, as two PNG files
(640 x 480) from a report.

    .venv/bin/python tools/net_plot.py NET_REPORT.json --plots=DIR
"""
import os
import sys

from report_tool import plot_main


def curves(report):
    """{(transport, pair label): (bytes, latency us, bandwidth MB/s)}."""
    net = report["net"]
    out = {}
    for pair in net["pairs"]:
        label = f"{pair['sender']}->{pair['receiver']}"
        for transport in net["transports"]:
            figures = pair.get(transport, [])
            out[(transport, label)] = ([f["bytes"] for f in figures],
                                       [f["latency_us"] for f in figures],
                                       [f["bandwidth_mb_per_s"] for f in figures])
    return out


def plot(report, folder):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    os.makedirs(folder, exist_ok=True)
    paths = []
    for index, (name, unit) in enumerate((("latency", "us"), ("bandwidth", "MB/s"))):
        fig, ax = plt.subplots(figsize=(6.4, 4.8), dpi=100)
        for (transport, label), values in sorted(curves(report).items()):
            ax.loglog(values[0], values[1 + index], "o-", ms=3, label=f"{transport} {label}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel(f"{name} ({unit})")
        ax.set_title(f"iotest net: {name} against message size")
        ax.grid(True, which="both", lw=0.3)
        ax.legend(fontsize=8)
        paths.append(os.path.join(folder, f"net_{name}.png"))
        fig.savefig(paths[-1])
        plt.close(fig)
    return paths


def main(argv=None):
    return plot_main(argv, "net_plot", __doc__, "`iotest net`", "net",
                     "not an `iotest net` report", plot)


if __name__ == "__main__":
    sys.exit(main())
