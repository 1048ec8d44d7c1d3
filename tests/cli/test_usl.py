"""The scaling study's fit and plots (issue 12, tools/usl.py): the
Universal Scalability Law recovers known parameters from synthetic data,
and the plots are PNG images of the expected size."""
import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
import usl  # noqa: E402

TOOL = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "usl.py")


@pytest.mark.parametrize("gamma,alpha,beta", [
    (1.0e6, 0.05, 0.002),   # retrograde inside the range: N* ~ 22
    (3.0e9, 0.20, 0.0),     # Amdahl: no peak
    (5.0e5, 0.01, 0.0005),  # nearly linear at first, peak ~ 44
])
def test_the_fit_recovers_known_parameters_within_5_percent(gamma, alpha, beta):
    n = np.array([1, 2, 3, 4, 6, 8, 12, 16, 24, 32])
    rng = np.random.default_rng(7)
    # 0.1 % noise: about what medians of repeated runs leave.
    x = usl.usl(n, gamma, alpha, beta) * (1 + 0.001 * rng.standard_normal(len(n)))
    f = usl.fit("overall", "visibilities/s", n, x)
    assert f.gamma == pytest.approx(gamma, rel=0.05)
    assert f.alpha == pytest.approx(alpha, rel=0.05)
    # beta = 0 (Amdahl) within what beta N^2 at N = 32 would add: 2 %.
    assert f.beta == pytest.approx(beta, rel=0.05, abs=2e-5)
    assert f.gamma_ci > 0 and f.alpha_ci > 0
    if beta > 0:
        assert f.peak_n == pytest.approx(np.sqrt((1 - alpha) / beta), rel=0.05)
        assert f.negative == (f.peak_n < 32)
    else:
        assert f.peak_n > 4 * 32 and not f.negative  # far beyond what was measured
    assert f.sublinear  # every case here loses more than 10 % by N = 32


def test_linear_scaling_is_not_flagged():
    n = np.array([1, 2, 3, 4])
    f = usl.fit("writing", "bytes/s", n, 2.0e9 * n)
    assert f.alpha < 1e-3 and f.beta < 1e-4
    assert not f.sublinear and not f.negative


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def report(streamers, vis_per_s, net, write, busy):
    per_rank = [{"role": "producer", "busy_s": 1.0, "host": "a"}] + [
        {"role": "streamer", "busy_s": busy, "host": "a"} for _ in range(streamers)]
    return {"pipeline": {"streamers": streamers, "ranks": streamers + 1, "per_rank": per_rank},
            "rates": {"vis_per_s": vis_per_s, "net_bytes_per_s": net,
                      "write_bytes_per_s": write},
            "counts": {"visibilities": 1_000_000}, "config": {"output": "/tmp/vis%d.h5"}}


@pytest.mark.long
def test_the_tool_fits_every_stage_of_reports_and_draws_the_plots(tmp_path):
    paths = []
    for n in (1, 2, 3, 4):
        r = report(n, usl.usl(n, 2e6, 0.1, 0.01), 1e8 * n, usl.usl(n, 5e8, 0.3, 0.0),
                   1.0 / usl.usl(n, 1.0, 0.05, 0.0))
        path = tmp_path / f"r{n}.json"
        path.write_text(json.dumps(r))
        paths.append(str(path))
    plots, out = tmp_path / "plots", tmp_path / "fits.json"
    proc = subprocess.run([sys.executable, TOOL, *paths, f"--plots={plots}", f"--json={out}"],
                          capture_output=True, text=True, check=True)
    assert "| overall |" in proc.stdout and "| writing |" in proc.stdout
    fits = {f["stage"]: f for f in json.loads(out.read_text())}
    assert set(fits) == {"overall", "network", "degridding", "writing"}
    assert fits["overall"]["alpha"] == pytest.approx(0.1, rel=0.05)
    assert fits["network"]["alpha"] < 1e-3  # linear
    for stage in fits:
        for kind in ("usl", "efficiency"):
            png = plots / f"{kind}_{stage}.png"
            assert png.stat().st_size > 5000
            assert png_size(png) == (640, 480)


def test_the_tool_needs_three_distinct_n(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(report(1, 1e6, 1e8, 1e9, 1.0)))
    proc = subprocess.run([sys.executable, TOOL, str(path), str(path)], capture_output=True,
                          text=True)
    assert proc.returncode == 2 and "3 or more distinct N" in proc.stderr
