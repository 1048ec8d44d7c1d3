"""What the Python benchmarks need on a fresh clone after `make deps`:
the project's venv (numpy, ducc0: the peers) and the native build of
iotest, as bench/common.sh gives the shell scripts. Imported first."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"

try:
    import ducc0  # noqa: F401
except ImportError:
    # Started by another python (`python3 bench/x.py`): rerun under the
    # venv's, where `make deps` installed the peer.
    # (By prefix: the venv's python is a link to the one that made it.)
    if VENV_PYTHON.exists() and Path(sys.prefix).resolve() != VENV_PYTHON.parent.parent.resolve():
        os.execv(str(VENV_PYTHON), [str(VENV_PYTHON), *sys.argv])
    sys.exit("ducc0 is needed: run `make deps` (it installs requirements.txt into .venv)")

if not (ROOT / "build" / "bin" / "iotest").exists():
    print("bench: build/bin/iotest is missing; building it (make build)", file=sys.stderr)
    subprocess.run(["make", "-s", "build"], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
