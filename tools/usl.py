#!/usr/bin/env python3
"""The scaling study's fit (issue 12; SDP Memo 56): the Universal
Scalability Law

    X(N) = gamma N / (1 + alpha (N - 1) + beta N (N - 1))

fitted to throughput X against N (streamers, ranks or nodes) for each
stage of a set of `iotest run` reports, with 95 % confidence intervals,
the peak N* = sqrt((1 - alpha) / beta), flags for sub-linear and negative
(retrograde) scaling, and the plots: throughput with the fit, the linear
and Amdahl bounds and the peak; efficiency against N.

    .venv/bin/python tools/usl.py REPORT.json... [--n=streamers|ranks|nodes]
                     [--plots=DIR] [--json=FILE]

Python is for analysis only: the C++ program never runs this.
"""
import argparse
import json
import math
import os
import sys
import warnings
from dataclasses import asdict, dataclass, field

import numpy as np
from scipy import optimize, stats

from report_tool import load_report

# A stage's throughput in a report, and its unit.
STAGES = {
    "overall": ("visibilities/s", lambda r: r["rates"]["vis_per_s"]),
    "network": ("bytes/s", lambda r: r["rates"]["net_bytes_per_s"]),
    "degridding": ("visibilities/s", lambda r: degridding_rate(r)),
    # A dry run writes nothing (the null back-end only counts): no stage.
    "writing": ("bytes/s", lambda r: r["rates"].get("write_bytes_per_s", 0.0)
                if r.get("config", {}).get("output") else 0.0),
}
# Efficiency at the largest N below which scaling counts as sub-linear.
SUBLINEAR_EFFICIENCY = 0.9


def usl(n, gamma, alpha, beta):
    n = np.asarray(n, dtype=float)
    return gamma * n / (1 + alpha * (n - 1) + beta * n * (n - 1))


@dataclass
class Fit:
    stage: str
    unit: str
    n: list
    throughput: list
    gamma: float = math.nan
    alpha: float = math.nan
    beta: float = math.nan
    # 95 % confidence half-widths (NaN with fewer than 4 points: no
    # degrees of freedom left for the error).
    gamma_ci: float = math.nan
    alpha_ci: float = math.nan
    beta_ci: float = math.nan
    peak_n: float = math.inf  # N*, where throughput is largest (inf: beta = 0)
    efficiency: list = field(default_factory=list)  # X(N) / (N X(1)) as fitted
    sublinear: bool = False
    negative: bool = False  # retrograde: the peak lies inside the measured range


def fit(stage, unit, n, x):
    """Least squares with alpha, beta >= 0 (contention and coherency cannot
    speed a system up); gamma starts from the smallest N's throughput."""
    n = np.asarray(n, dtype=float)
    x = np.asarray(x, dtype=float)
    order = np.argsort(n)
    n, x = n[order], x[order]
    out = Fit(stage, unit, n.tolist(), x.tolist())
    if len(n) < 3 or not np.all(x > 0):
        return out
    p0 = (x[0] / n[0], 0.01, 0.0001)
    with warnings.catch_warnings():  # 3 points leave no covariance: the CIs say so (NaN)
        warnings.simplefilter("ignore", optimize.OptimizeWarning)
        popt, pcov = optimize.curve_fit(usl, n, x, p0=p0, bounds=([0, 0, 0], [np.inf, 1, 1]),
                                        x_scale=(p0[0], 0.1, 0.01), max_nfev=10000)
    out.gamma, out.alpha, out.beta = (float(v) for v in popt)
    dof = len(n) - 3
    if dof > 0 and np.all(np.isfinite(pcov)):
        t = stats.t.ppf(0.975, dof)
        out.gamma_ci, out.alpha_ci, out.beta_ci = (float(t * math.sqrt(max(v, 0)))
                                                   for v in np.diag(pcov))
    if out.beta > 0:
        out.peak_n = math.sqrt(max(0.0, 1 - out.alpha) / out.beta)
    fitted = usl(n, *popt)
    out.efficiency = (fitted / (n * out.gamma)).tolist()
    out.sublinear = bool(out.efficiency[-1] < SUBLINEAR_EFFICIENCY)
    out.negative = bool(out.peak_n < n[-1])
    return out


def degridding_rate(report):
    """Visibilities over the busiest streamer's busy time."""
    busy = [k["busy_s"] for k in report["pipeline"]["per_rank"] if k["role"] == "streamer"]
    return report["counts"]["visibilities"] / max(busy) if busy and max(busy) > 0 else 0.0


def n_of(report, by):
    pl = report["pipeline"]
    if by == "streamers":
        return pl["streamers"]
    if by == "ranks":
        return pl["ranks"]
    return len({k["host"] for k in pl["per_rank"]})  # nodes


def fits_of(reports, by="streamers"):
    n = [n_of(r, by) for r in reports]
    out = []
    for stage, (unit, rate) in STAGES.items():
        x = [rate(r) for r in reports]
        if any(v > 0 for v in x):
            out.append(fit(stage, unit, n, x))
    return out


def plot(f, folder):
    """Two PNG files per stage, 640 x 480: throughput, efficiency."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    os.makedirs(folder, exist_ok=True)
    n = np.asarray(f.n)
    # Twice the measured range, stretched to show a peak up to 4x beyond it.
    top = 2 * n.max()
    if math.isfinite(f.peak_n) and f.peak_n <= 4 * n.max():
        top = max(top, 1.2 * f.peak_n)
    grid = np.linspace(1, top, 200)
    paths = []
    fig, ax = plt.subplots(figsize=(6.4, 4.8), dpi=100)
    ax.plot(n, f.throughput, "o", label="measured")
    if math.isfinite(f.gamma):
        ax.plot(grid, usl(grid, f.gamma, f.alpha, f.beta),
                label=f"USL: gamma {f.gamma:.3g}, alpha {f.alpha:.3g}, beta {f.beta:.3g}")
        ax.plot(grid, f.gamma * grid, "--", label="linear")
        ax.plot(grid, usl(grid, f.gamma, f.alpha, 0), ":", label="Amdahl (beta = 0)")
        if math.isfinite(f.peak_n) and f.peak_n <= grid[-1]:
            ax.axvline(f.peak_n, color="grey", lw=0.8, label=f"peak N* = {f.peak_n:.3g}")
    ax.set_xlabel("N")
    ax.set_ylabel(f"{f.stage} ({f.unit})")
    ax.set_title(f"{f.stage}: throughput against N")
    ax.legend(fontsize=8)
    paths.append(os.path.join(folder, f"usl_{f.stage}.png"))
    fig.savefig(paths[-1])
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6.4, 4.8), dpi=100)
    x1 = f.gamma if math.isfinite(f.gamma) else f.throughput[0] / f.n[0]
    ax.plot(n, np.asarray(f.throughput) / (n * x1), "o", label="measured")
    if math.isfinite(f.gamma):
        ax.plot(grid, usl(grid, f.gamma, f.alpha, f.beta) / (grid * f.gamma), label="USL")
    ax.axhline(1, color="grey", lw=0.8)
    ax.set_ylim(0, 1.2)
    ax.set_xlabel("N")
    ax.set_ylabel("efficiency X(N) / (N gamma)")
    ax.set_title(f"{f.stage}: efficiency against N")
    ax.legend(fontsize=8)
    paths.append(os.path.join(folder, f"efficiency_{f.stage}.png"))
    fig.savefig(paths[-1])
    plt.close(fig)
    return paths


def table(fits):
    lines = ["| stage | N | gamma | alpha | beta | peak N* | efficiency at max N | flags |",
             "|---|---|---|---|---|---|---|---|"]
    for f in fits:
        flags = ", ".join(name for name, on in (("sub-linear", f.sublinear),
                                                 ("negative", f.negative)) if on) or "-"
        eff = f"{f.efficiency[-1]:.2f}" if f.efficiency else "-"
        lines.append(
            f"| {f.stage} | {','.join(str(int(v)) for v in f.n)} | {f.gamma:.4g} "
            f"+/- {f.gamma_ci:.2g} | {f.alpha:.3g} +/- {f.alpha_ci:.2g} | {f.beta:.3g} "
            f"+/- {f.beta_ci:.2g} | {f.peak_n:.3g} | {eff} | {flags} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="usl", description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", help="iotest run reports (JSON)")
    parser.add_argument("--n", choices=("streamers", "ranks", "nodes"), default="streamers",
                        help="what N counts (default: streamers)")
    parser.add_argument("--plots", help="folder for the PNG plots")
    parser.add_argument("--json", help="write the fits here")
    args = parser.parse_args(argv)
    reports = []
    for path in args.reports:
        reports.append(load_report(parser, path, "pipeline", "not an `iotest run` report"))
    fits = fits_of(reports, args.n)
    if len(set(n_of(r, args.n) for r in reports)) < 3:
        parser.exit(2, "usl: error: reports: expected runs at 3 or more distinct N\n")
    print(table(fits))
    if args.plots:
        for f in fits:
            for path in plot(f, args.plots):
                print(f"wrote {path}")
    if args.json:
        with open(args.json, "w") as out:
            # JSON has no infinity or NaN: null.
            clean = [{k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                      for k, v in asdict(f).items()} for f in fits]
            json.dump(clean, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
