#!/usr/bin/env python3
"""Prints the per-family table of docs/recombination-sets.md.

For each published family (same N/yN and xM) it resolves the smallest
published member with `iotest plan` and measures its predict accuracy on 16
subgrids with `iotest recombine` (10 sources, seed 1).

Usage: tools/rec_set_table.py [path/to/iotest] > table.md
"""
import csv
import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

root = Path(__file__).resolve().parent.parent
iotest = sys.argv[1] if len(sys.argv) > 1 else str(root / "build/bin/iotest")


def size(text):
    return int(text[:-1]) * 1024 if text.endswith("k") else int(text)


families = {}
with open(root / "tests/data/rec-sets.csv") as f:
    for row in csv.DictReader(f):
        n, yn, xm = map(size, row["rec_set"].split("-"))
        key = (Fraction(n, yn), xm)
        if key not in families or n < families[key][0]:
            families[key] = (n, row["rec_set"])


def run(*args):
    out = subprocess.run([iotest, *args, "--report=-"], capture_output=True, text=True,
                         check=True, timeout=600).stdout
    return json.loads(out)


print("| N/yN | xM | m | facets | yB/yN | W | xA/xM | wire eff. | member | subgrids | "
      "predict RMSE (max of 16) |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for (ratio, xm), (_, name) in sorted(families.items()):
    c = run("plan", f"--rec-set={name}")["config"]
    acc = run("recombine", f"--rec-set={name}", "--direction=predict", "--subgrids=16",
              "--check=all")["accuracy"]["subgrid_rmse_max"]
    print(f"| {ratio} | {xm} | {c['m']} | {c['facets_per_axis']}x{c['facets_per_axis']} | "
          f"{c['yB'] / c['yN']:.3f} | {c['W']} | {c['xA'] / c['xM']:.3f} | "
          f"{100 * c['wire_efficiency']:.1f}% | {name} | {c['subgrids_per_axis']}^2 | {acc:.1e} |",
          flush=True)
