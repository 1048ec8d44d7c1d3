"""What iotest's report tools share (net_plot.py, timeline_plot.py,
usl.py): a report named on the command line, read with one line on stderr
and exit status 2 when it cannot be, and the plot tools' command line."""
import argparse
import json


def load_report(parser, path, section, missing):
    """The JSON report at `path`. Exits 2 naming it when it cannot be read
    or holds no `section` (`missing` says what it should have been)."""
    try:
        with open(path) as f:
            report = json.load(f)
    except (OSError, ValueError) as e:
        parser.exit(2, f"{parser.prog}: error: {path}: {e}\n")
    if not isinstance(report, dict) or section not in report:
        parser.exit(2, f"{parser.prog}: error: {path}: {missing}\n")
    return report


def plot_main(argv, prog, doc, kind, section, missing, plot):
    """`prog REPORT [--plots=DIR]`: plot(report, folder) draws the PNG
    files of a `kind` report holding `section`; their paths are printed,
    one per line."""
    parser = argparse.ArgumentParser(prog=prog, description=doc.split("\n\n")[0])
    parser.add_argument("report", help=f"an {kind} report (JSON)")
    parser.add_argument("--plots", default=".", help="folder for the PNG files")
    args = parser.parse_args(argv)
    report = load_report(parser, args.report, section, missing)
    for path in plot(report, args.plots):
        print(path)
    return 0
