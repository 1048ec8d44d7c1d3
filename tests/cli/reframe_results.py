"""What the ReFrame tests (tests/cli/test_reframe.py on this machine,
tests/cluster/test_reframe.py on the virtual cluster) share: where ReFrame
and the checks are, the checks' names, and reading ReFrame's run report and
performance log."""
import json
import os

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
REFRAME = os.path.join(REPO, ".venv", "bin", "reframe")
CONFIG = os.path.join(REPO, "reframe", "config.py")
CHECKS = os.path.join(REPO, "reframe")
# Every check of reframe/iotest_checks.py, as ReFrame names its variants.
CHECK_NAMES = {"IotestPredict", "IotestStorage %backend=posix", "IotestStorage %backend=hdf5",
               "IotestStorage %backend=ms",
               "IotestStorage %backend=phdf5", "IotestNet", "IotestImaging %direction=image",
               "IotestImaging %direction=both", "IotestScale"}


def run_report(folder):
    """{display name: test case} of ReFrame's run report, fixtures left out."""
    with open(os.path.join(folder, "report.json")) as f:
        report = json.load(f)
    return {tc["display_name"]: tc for run in report["runs"] for tc in run["testcases"]
            if not tc.get("fixture")}


def logged_performance(folder, system, partition):
    """{display name: {variable: value}} from the performance log (the
    filelog handler of reframe/config.py: NAME=VALUE|UNIT|... fields)."""
    logged = {}
    logdir = os.path.join(folder, "perflogs", system, partition)
    for name in sorted(os.listdir(logdir)):
        with open(os.path.join(logdir, name)) as f:
            for line in f.readlines()[1:]:  # the first is the header
                fields = line.rstrip("\n").split("|")
                figures = logged.setdefault(fields[2], {})
                for field in fields:
                    var, eq, value = field.partition("=")
                    if eq and var.isidentifier() and var not in ("jobid", "ref"):
                        figures[var] = float(value)
    return logged
