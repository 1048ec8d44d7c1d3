import json
import os
import subprocess

import pytest

# Every iotest run here is bounded so a hang fails the test instead of CI.
TIMEOUT_S = 300


@pytest.fixture
def iotest():
    binary = os.environ.get("IOTEST_BIN", "build/bin/iotest")

    def run(*args, check=None):
        proc = subprocess.run([binary, *args], capture_output=True, text=True,
                              timeout=TIMEOUT_S)
        if check is not None:
            assert proc.returncode == check, (proc.returncode, proc.stdout, proc.stderr)
        return proc

    return run


def load(path):
    with open(path) as f:
        return json.load(f)
