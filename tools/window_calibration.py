#!/usr/bin/env python3
"""Predict accuracy against window width W, one published set per facet fill
yB/yN: the measurement behind the W rule in docs/recombination-sets.md.

Usage: tools/window_calibration.py [path/to/iotest]
"""
import json
import subprocess
import sys
from pathlib import Path

root = Path(__file__).resolve().parent.parent
iotest = sys.argv[1] if len(sys.argv) > 1 else str(root / "build/bin/iotest")
sets = {"1/3": "8k-6k-256", "3/8": "8k-8k-256", "1/2": "8k-4k-256"}
widths = [14, 15, 16, 17, 18, 18.5, 19, 20, 22]


def rmse(rec_set, w):
    out = subprocess.run([iotest, "recombine", f"--rec-set={rec_set}", f"--window-width={w}",
                          "--direction=predict", "--subgrids=16", "--check=all",
                          "--source-count=20", "--report=-"],
                         capture_output=True, text=True, check=True, timeout=600).stdout
    return json.loads(out)["accuracy"]["subgrid_rmse_max"]


print("| W | " + " | ".join(f"yB/yN = {q} ({s})" for q, s in sets.items()) + " |")
print("|---|" + "---|" * len(sets))
for w in widths:
    print(f"| {w} | " + " | ".join(f"{rmse(s, w):.1e}" for s in sets.values()) + " |", flush=True)
