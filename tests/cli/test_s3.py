"""The s3 back-end's checks that need no store (issue 57): a name that is
not an S3 URL, or an S3 URL for another back-end, a malformed bucket, a
back-end option out of range, missing credentials: one line naming the
option or variable, exit 2, before any work, and never the secret. The
back-end against a real store (Ceph's object gateway) is in
tests/cluster/test_object_store.py."""
import os
import subprocess

import pytest

from conftest import iotest_binary

OBS = ["--synthetic-vis", "--rec-set=T05_", "--vis-set=vlaa", "--time=-1800:1800/16/8",
       "--freq=260e6:300e6/32/16", "--dec=-40", "--no-progress"]
SECRET = "do-not-print-me-0123456789"


def run_alone(*args, **env_changes):
    """iotest run as one process (no store is reached: every case fails
    before), with AWS_* variables and ~/.aws as given only."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["HOME"] = env_changes.pop("HOME", "/nonexistent")
    env.update(env_changes)
    return subprocess.run([iotest_binary(), "run", *OBS, *args], capture_output=True, text=True,
                          env=env, timeout=60)


def one_line(proc):
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("iotest: error: "), proc.stderr
    return lines[0]


@pytest.mark.parametrize("args, expected", [
    (["--storage=s3", "out%d"], "OUTPUT: expected an s3://BUCKET/KEY URL for --storage=s3"),
    (["--storage=hdf5", "s3://iotest/x%d"], "OUTPUT: expected a path (not a URL) for --storage=hdf5"),
    (["s3://Bad_Bucket/x%d"], "OUTPUT: 's3://Bad_Bucket/x0': a bucket name"),
    (["--s3.part-size=4", "s3://iotest/x%d"], "--s3.part-size: expected a part size in MiB >= 5"),
    (["--s3.parts-in-flight=0", "s3://iotest/x%d"], "--s3.parts-in-flight: expected"),
    (["--posix.direct", "s3://iotest/x%d"], "--posix.direct: applies to --storage=posix, not s3"),
])
def test_a_bad_name_or_option_is_one_line(args, expected):
    assert expected in one_line(run_alone(*args))


def test_missing_credentials_name_the_variable():
    line = one_line(run_alone("s3://iotest/x%d"))
    assert "AWS_ACCESS_KEY_ID" in line, line


def test_a_profile_that_is_not_there_is_named(tmp_path):
    aws = tmp_path / ".aws"
    aws.mkdir()
    (aws / "credentials").write_text(f"[default]\naws_access_key_id = AKIA\n"
                                     f"aws_secret_access_key = {SECRET}\n")
    line = one_line(run_alone("s3://iotest/x%d", HOME=str(tmp_path), AWS_PROFILE="elsewhere"))
    assert "elsewhere" in line and SECRET not in line, line


def test_a_store_that_does_not_answer_is_named_without_the_secret():
    # Nothing listens on port 9 of this host: refused at once, and the
    # claim, before any work, says so (after its few retries).
    proc = run_alone("s3://iotest/x%d", AWS_ACCESS_KEY_ID="AKIA", AWS_SECRET_ACCESS_KEY=SECRET,
                     AWS_ENDPOINT_URL="http://127.0.0.1:9")
    line = one_line(proc)
    assert "OUTPUT" in line and "127.0.0.1:9" in line and SECRET not in proc.stderr, line


def test_the_help_lists_the_back_end_and_its_options():
    out = subprocess.run([iotest_binary(), "run", "--help"], capture_output=True, text=True,
                         timeout=30).stdout
    assert "--storage=s3" in out and "--s3.part-size" in out and "--s3.parts-in-flight" in out
    assert "s3:// s3" in out, out
