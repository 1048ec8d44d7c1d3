"""`iotest net`, the interconnect benchmark (issue 12): latency and bandwidth
between pairs of ranks over message size, for MPI and TCP, checked."""
import os
import re

import pytest

from conftest import load

# Few iterations, so that each job takes a second or two on two cores.
QUICK = ["--iterations=20", "--warmup=2", "--window=8"]
SIZES = [2**k for k in range(21)]  # 1 B to 1 MiB
RUN_TIMEOUT_S = 60


@pytest.mark.parametrize("ranks,pairs", [(2, [(0, 1)]), (4, [(0, 1), (2, 3)])])
def test_net_measures_every_size_both_transports_every_pair_checked(mpirun, tmp_path, ranks,
                                                                    pairs):
    report = tmp_path / "net.json"
    # A budget of an hour: the planned counts, all of them.
    proc = mpirun(ranks, "net", "--max-size=1048576", "--check", *QUICK, "--time-per-size=3600",
                  f"--report={report}", check=0, timeout=RUN_TIMEOUT_S)
    r = load(report)
    assert r["mode"] == "net"
    n = r["net"]
    assert n["ranks"] == ranks and n["nodes"] == 1 and n["window"] == 8
    assert n["transports"] == ["mpi", "tcp"]
    assert [z["bytes"] for z in n["sizes"]] == SIZES
    assert all(z["iterations"] >= 1 and z["windows"] >= 1 for z in n["sizes"])
    assert n["time_per_size_s"] == 3600
    # One node: consecutive ranks pair up, all measured at once.
    assert [(p["sender"], p["receiver"]) for p in n["pairs"]] == pairs
    for p in n["pairs"]:
        assert p["sender_host"] and p["receiver_host"]
        assert re.fullmatch(r"127\.0\.0\.1:\d+", p["tcp_address"]), p["tcp_address"]
        for transport in ("mpi", "tcp"):
            figures = p[transport]
            assert [f["bytes"] for f in figures] == SIZES
            for f in figures:
                assert f["latency_us"] > 0 and f["bandwidth_mb_per_s"] > 0, (transport, f)
                # Two round trips and a window, each message checked on arrival.
                assert f["messages_checked"] == 2 * 2 + 8 and f["messages_wrong"] == 0, f
            for z, f in zip(n["sizes"], figures):
                assert (f["iterations"], f["warmup"], f["windows"], f["window_warmup"],
                        f["window"]) == (z["iterations"], z["warmup"], z["windows"],
                                         z["window_warmup"], 8), (z, f)
    assert n["checked"] and n["passed"] and n["messages_wrong"] == 0
    assert n["messages_checked"] == len(pairs) * 2 * len(SIZES) * 12
    assert r["environment"]["command_line"].endswith(f"--report={report}")

    # The table, once, for humans: a row per size, latency and bandwidth
    # per transport (the mean over the pairs).
    out = proc.stdout
    assert re.search(r"^\s+MPI\s+TCP$", out, re.M), out
    assert re.search(r"^\s+size\s+latency us\s+bandwidth MB/s\s+latency us\s+bandwidth MB/s$",
                     out, re.M), out
    rows = re.findall(r"^  (\d+ [KM]?i?B)((?:\s+[\d.]+){4})$", out, re.M)
    assert [size for size, _ in rows] == [
        f"{s} B" if s < 1024 else f"{s // 1024} KiB" if s < 2**20 else "1 MiB" for s in SIZES]
    assert all(float(v) > 0 for _, figures in rows for v in figures.split())
    assert "messages checked, 0 wrong: passed" in out
    assert "--time-per-size" not in out


def test_a_tiny_time_budget_times_one_iteration_and_one_message_and_says_so(mpirun, tmp_path):
    """--time-per-size (IMB's -time): a budget no iteration fits leaves each
    test its first warm-up and one timed iteration, each bandwidth window one
    message; the report and the table give the counts used."""
    report = tmp_path / "net.json"
    proc = mpirun(2, "net", "--max-size=4096", "--check", *QUICK, "--time-per-size=1e-9",
                  f"--report={report}", check=0, timeout=RUN_TIMEOUT_S)
    n = load(report)["net"]
    assert n["time_per_size_s"] == 1e-9 and n["window"] == 8
    # The sizes keep the counts planned; each figure has the counts used.
    assert all((z["iterations"], z["warmup"]) == (20, 2) for z in n["sizes"])
    (p,) = n["pairs"]
    for transport in ("mpi", "tcp"):
        for f in p[transport]:
            assert (f["iterations"], f["warmup"], f["windows"], f["window_warmup"],
                    f["window"]) == (1, 1, 1, 1, 1), (transport, f)
            assert f["latency_us"] > 0 and f["bandwidth_mb_per_s"] > 0, (transport, f)
            # --check sends the window used: two round trips and one message.
            assert f["messages_checked"] == 2 * 2 + 1 and f["messages_wrong"] == 0, f
    out = proc.stdout
    assert "--time-per-size=1e-09 s bound these sizes' timed counts" in out, out
    bound = re.findall(r"^  (\d+ [KM]?i?B)\s+1/20\s+1/20 x 1\s+1/20\s+1/20 x 1$", out, re.M)
    assert len(bound) == len(n["sizes"]), out


def test_net_explicit_pairs_and_one_transport(mpirun, tmp_path):
    report = tmp_path / "net.json"
    proc = mpirun(3, "net", "--pairs=2:0", "--transport=tcp", "--min-size=4", "--max-size=64",
                  *QUICK, f"--report={report}", check=0, timeout=RUN_TIMEOUT_S)
    n = load(report)["net"]
    assert n["transports"] == ["tcp"] and [z["bytes"] for z in n["sizes"]] == [4, 8, 16, 32, 64]
    (p,) = n["pairs"]
    assert (p["sender"], p["receiver"]) == (2, 0) and "mpi" not in p
    assert all(f["latency_us"] > 0 and f["bandwidth_mb_per_s"] > 0 for f in p["tcp"])
    assert not n["checked"] and n["messages_checked"] == 0
    assert re.search(r"^\s+TCP$", proc.stdout, re.M) and "--check" not in proc.stdout


@pytest.mark.parametrize("pairs", ["0:0", "0:4", "0:1,1:2", "0-1", "0:1,", "a:b", "-1:1",
                                   "0:1:2"])
def test_net_refuses_bad_pairs_on_every_rank(mpirun, pairs):
    proc = mpirun(4, "net", f"--pairs={pairs}", "--max-size=1", timeout=RUN_TIMEOUT_S)
    assert proc.returncode == 2, (pairs, proc.stdout, proc.stderr)
    errors = [l for l in proc.stderr.splitlines() if l.startswith("iotest: error")]
    assert len(errors) == 1 and "--pairs" in errors[0], (pairs, proc.stderr)


@pytest.mark.parametrize("args,option", [
    (["--min-size=0"], "--min-size"),
    (["--min-size=8", "--max-size=4"], "--max-size"),
    (["--transport=udp"], "--transport"),
    (["--window=0"], "--window"),
    (["--iterations=0"], "--iterations"),
    (["--time-per-size=0"], "--time-per-size"),
    (["--time-per-size=-1"], "--time-per-size"),
    (["--pairs"], "--pairs"),  # a parse error, said once too
])
def test_net_refuses_bad_options(mpirun, args, option):
    proc = mpirun(2, "net", *args, timeout=RUN_TIMEOUT_S)
    assert proc.returncode == 2, (args, proc.stderr)
    errors = [l for l in proc.stderr.splitlines() if l.startswith("iotest: error")]
    assert len(errors) == 1 and option in errors[0], (args, proc.stderr)


def test_net_needs_two_ranks(mpirun):
    proc = mpirun(1, "net", timeout=RUN_TIMEOUT_S)
    assert proc.returncode == 2 and "at least 2 ranks" in proc.stderr, proc.stderr


def test_the_net_curves_plot_from_a_report(mpirun, tmp_path):
    """tools/net_plot.py: latency and bandwidth against size, as PNG files."""
    import struct
    import subprocess
    import sys
    report, plots = tmp_path / "net.json", tmp_path / "plots"
    mpirun(2, "net", "--max-size=4096", "--iterations=20", f"--report={report}", check=0)
    tool = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "net_plot.py")
    subprocess.run([sys.executable, tool, str(report), f"--plots={plots}"], check=True,
                   capture_output=True)
    for name in ("latency", "bandwidth"):
        with open(plots / f"net_{name}.png", "rb") as f:
            head = f.read(24)
        assert head[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", head[16:24]) == (640, 480)
        assert (plots / f"net_{name}.png").stat().st_size > 5000
