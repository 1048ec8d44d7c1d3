"""The time line plots of an `iotest run` (tools/timeline_plot.py): busy,
wait and idle per rank, and the stage rates summed over the ranks, from a
synthetic report: no iotest binary needed."""
import json
import os
import struct
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
import timeline_plot  # noqa: E402

TOOL = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "timeline_plot.py")


def rank(number, role, busy, wait, vis=None, written=None, sent=None):
    n = len(busy)
    return {"rank": number, "role": role, "host": "node1", "busy_s": busy, "wait_s": wait,
            "visibilities": vis or [0] * n, "bytes_written": written or [0] * n,
            "bytes_sent": sent or [0] * n}


def report():
    # Interval 0.5 s; the writer stopped one interval early (shorter arrays);
    # the producer's busy + wait overshoots the interval in its last one.
    return {"mode": "run", "timeline": {"interval_s": 0.5, "start_s": 0.0, "ranks": [
        rank(1, "streamer", [0.5, 0.25, 0.1], [0.0, 0.25, 0.1], vis=[1000, 3000, 500],
             sent=[0, 0, 0]),
        rank(0, "producer", [0.45, 0.5, 0.4], [0.05, 0.0, 0.2], sent=[1.0e6, 2.0e6, 0]),
        rank(2, "writer", [0.1, 0.2], [0.4, 0.1], written=[4.0e6, 5.0e5]),
    ]}}


def cli(*args):
    return subprocess.run([sys.executable, TOOL, *map(str, args)], capture_output=True,
                          text=True, timeout=120)


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def test_rows_are_fractions_idle_clipped_and_short_ranks_padded():
    r = timeline_plot.rows(report())
    assert len(r) == 3 and all(len(row) == 3 for row in r)
    producer, streamer, writer = r  # in rank order, whatever the report's order
    assert producer[0] == pytest.approx((0.9, 0.1, 0.0))
    assert producer[2] == pytest.approx((0.8, 0.4, 0.0))  # overshoot: idle clipped at 0
    assert streamer[1] == pytest.approx((0.5, 0.5, 0.0))
    assert streamer[2] == pytest.approx((0.2, 0.2, 0.6))
    assert writer[1] == pytest.approx((0.4, 0.2, 0.4))
    assert writer[2] == (0.0, 0.0, 1.0)  # padded as idle


def test_rates_sum_over_ranks_per_second():
    times, vis, written, sent = timeline_plot.rates(report())
    assert times.tolist() == pytest.approx([0.0, 0.5, 1.0])
    assert vis.tolist() == pytest.approx([2000, 6000, 1000])
    assert written.tolist() == pytest.approx([8.0e6, 1.0e6, 0.0])  # writer padded with 0
    assert sent.tolist() == pytest.approx([2.0e6, 4.0e6, 0.0])


def test_the_plots_are_640_by_480_png_files(tmp_path):
    path, plots = tmp_path / "run.json", tmp_path / "plots"
    path.write_text(json.dumps(report()))
    proc = cli(path, f"--plots={plots}")
    assert proc.returncode == 0, proc.stderr
    names = [plots / "timeline_ranks.png", plots / "timeline_rates.png"]
    assert proc.stdout.splitlines() == [str(p) for p in names]
    for p in names:
        assert p.stat().st_size > 5000 and png_size(p) == (640, 480)


def test_plot_returns_the_paths(tmp_path):
    paths = timeline_plot.plot(report(), str(tmp_path))
    assert [os.path.basename(p) for p in paths] == ["timeline_ranks.png", "timeline_rates.png"]
    assert all(png_size(p) == (640, 480) for p in paths)


def test_a_report_without_a_time_line_is_refused(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"mode": "run"}))
    proc = cli(path, f"--plots={tmp_path}")
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"timeline_plot: error: {path}:")
    assert "no time line" in line and "`iotest run`" in line
    assert not (tmp_path / "timeline_ranks.png").exists()


@pytest.mark.parametrize("content", ["{not json", None])
def test_a_bad_or_missing_report_is_refused(tmp_path, content):
    path = tmp_path / "run.json"
    if content is not None:
        path.write_text(content)
    proc = cli(path)
    assert proc.returncode == 2
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"timeline_plot: error: {path}:")
