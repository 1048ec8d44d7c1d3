"""`iotest h5`, the checkpoint kernel (issue 10): a 3-D process grid
writes a 4-D dataset through parallel HDF5 with seism-core's knobs."""
import h5py
import numpy as np
import pytest

from conftest import MPI_TIMEOUT_S, load


@pytest.mark.parametrize("ranks,args,mode", [
    (2, ["--transfer=collective"], "collective"),
    (2, ["--transfer=independent"], "independent"),
    (4, ["--collective-metadata", "--precreate", "--chunk=8,8,8"], "collective"),
    (3, ["--transfer=independent", "--fill", "--alloc=incremental",
         "--hint=romio_cb_write=enable", "--alignment=4096", "--chunk-cache=1048576"],
     "independent"),
])
def test_h5_writes_every_step_of_every_rank(mpirun, tmp_path, ranks, args, mode):
    path, report = tmp_path / "ck.h5", tmp_path / "r.json"
    mpirun(ranks, "h5", str(path), "--domain=8,8,16", "--steps=3", "--check", "--keep", *args,
           f"--report={report}", check=0, timeout=MPI_TIMEOUT_S)
    c = load(report)["h5"]
    grid = c["grid"]
    assert grid[0] * grid[1] * grid[2] == ranks and c["steps"] == 3
    assert c["bytes"] == 3 * ranks * 8 * 8 * 16 * 8 and c["bytes_per_step"] * 3 == c["bytes"]
    assert len(c["step_s"]) == 3 and c["write_s"] > 0 and c["create_s"] > 0
    assert c["aggregate_bytes_per_s"] < c["raw_bytes_per_s"]
    assert c["transfer"] == mode and c["checked"] and c["values_wrong"] == 0
    # What HDF5 did, not only what was asked.
    if mode == "independent":
        assert "collective" not in c["io_mode"].replace("independent", "")
        assert "independent transfers asked" in c["no_collective_cause"]
    else:
        assert c["io_mode"].endswith("collective") and c["no_collective_cause"] == ""
    metadata = "--collective-metadata" in args
    assert c["metadata_reads_collective"] == metadata == c["metadata_writes_collective"]
    # The file as any HDF5 reader sees it: step t, cell (x, y, z) holds
    # ((t * X + x) * Y + y) * Z + z.
    with h5py.File(path, "r") as f:
        data = f["data"][...]
    g = [grid[a] * d for a, d in enumerate((8, 8, 16))]
    assert data.shape == (3, *g)
    t, x, y, z = np.indices(data.shape)
    np.testing.assert_array_equal(data, ((t * g[0] + x) * g[1] + y) * g[2] + z)


@pytest.mark.long
def test_h5_removes_its_file_unless_kept_and_refuses_bad_input(mpirun, tmp_path):
    path = tmp_path / "ck.h5"
    mpirun(2, "h5", str(path), "--domain=4,4,4", "--steps=2", check=0, timeout=MPI_TIMEOUT_S)
    assert not path.exists()
    for args, option in ((["--grid=3,1,1"], "--grid"), (["--steps=0"], "--steps"),
                         (["--alloc=sometimes"], "--alloc"), (["--hint=novalue"], "--hint"),
                         (["--transfer=both"], "--transfer"), (["--chunk=0,4,400"], "--chunk"),
                         (["--bogus"], "--bogus")):  # a parse error, said once too
        proc = mpirun(2, "h5", str(path), "--domain=4,4,4", *args, timeout=MPI_TIMEOUT_S)
        assert proc.returncode == 2, (args, proc.stderr)
        errors = [l for l in proc.stderr.splitlines() if l.startswith("iotest: error")]
        assert len(errors) == 1 and option in errors[0], proc.stderr
    path.write_bytes(b"old")
    proc = mpirun(2, "h5", str(path), "--domain=4,4,4", timeout=MPI_TIMEOUT_S)
    assert proc.returncode == 2 and str(path) in proc.stderr
    assert path.read_bytes() == b"old"
