"""MeasurementSets (--storage=ms, issue 36): a run's files verify, hold
every row the observation has, and open in casacore as the field's tools
open them; bad MeasurementSets and misplaced options get one line and
exit status 2."""
import json
import shutil
import subprocess
import zlib

import numpy as np
import pytest

from conftest import MPI_TIMEOUT_S, MPIRUN, iotest_binary, mpi_env

tables = pytest.importorskip("casacore.tables")

# T05_ + vlaa at dec 34 (w matters), 351 baselines x 32 times x 16 channels.
OBS = ["--rec-set=T05_", "--vis-set=vlaa", "--dec=34", "--time=-900:900/32/16",
       "--freq=260e6:300e6/16/8"]
ROWS = 351 * 32


@pytest.fixture(scope="module")
def ms_set(tmp_path_factory):
    out = tmp_path_factory.mktemp("ms")
    proc = subprocess.run([*MPIRUN, "-np", "3", iotest_binary(), *OBS, "--no-progress",
                           "--storage=ms", str(out / "vis%d.ms")],
                          capture_output=True, text=True, timeout=MPI_TIMEOUT_S, env=mpi_env())
    assert proc.returncode == 0, proc.stderr
    return sorted(out.glob("vis*.ms"))


def test_a_run_writes_measurement_sets_that_verify(iotest, ms_set):
    assert len(ms_set) == 2  # a file per streamer's writer
    proc = iotest("verify", "--all", *map(str, ms_set), check=0)
    assert ": passed" in proc.stdout
    # Single precision, as MeasurementSets hold visibilities: the kernel's
    # 2e-8 and float32's rounding (2^-24 relative) together.
    rmse = float(proc.stdout.split("visibilities vs direct FT ")[1].split()[0])
    assert 1e-9 < rmse < 5e-8, proc.stdout


def test_every_file_holds_every_row_of_its_own_channels_in_the_field_s_layout(ms_set):
    """The SDP's layout (issue 46): a MeasurementSet per frequency range,
    each every (time, baseline) row once, no channel in two files."""
    channels = []
    for i, path in enumerate(ms_set):
        main = tables.table(str(path), ack=False)
        row_chunks = tables.table(str(path / "IOTEST_ROW_CHUNKS"), ack=False)
        assert main.nrows() == 16 * row_chunks.nrows() == ROWS
        assert main.getcoldesc("DATA")["valueType"] == "complex"
        assert main.getcolkeyword("DATA", "UNIT") == "Jy"
        assert main.getcolkeyword("UVW", "MEASINFO")["Ref"] == "J2000"
        pol = tables.table(str(path / "POLARIZATION"), ack=False)
        assert list(pol.getcol("CORR_TYPE")[0]) == [9]  # XX
        spw = tables.table(str(path / "SPECTRAL_WINDOW"), ack=False)
        # File i of 2: frequency chunk i of 2, channels 8i to 8i + 7.
        own = np.linspace(260e6, 300e6, 16)[8 * i:8 * i + 8]
        assert np.allclose(spw.getcol("CHAN_FREQ")[0], own)
        channels.extend(own)
        field = tables.table(str(path / "FIELD"), ack=False)
        # The phase centre in ICRS (labelled J2000): dec 34 of date at the
        # VLA is RA 46.62683, Dec 33.90986 there (docs/imaging.md,
        # "Coordinates: the uvw model").
        assert field.getcolkeyword("PHASE_DIR", "MEASINFO")["Ref"] == "J2000"
        assert np.allclose(np.degrees(field.getcol("PHASE_DIR")[0, 0]), [46.62683, 33.90986],
                           rtol=0, atol=1e-5)
        assert tables.table(str(path / "ANTENNA"), ack=False).nrows() == 27
        flags, data = main.getcol("FLAG")[:, :, 0], main.getcol("DATA")[:, :, 0]
        # Nothing flagged, every value written.
        assert data.shape == (ROWS, 8) and not flags.any() and np.all(data != 0)
        keys = zip(main.getcol("ANTENNA1"), main.getcol("ANTENNA2"), main.getcol("TIME"))
        assert len(set(keys)) == ROWS
    # Together the files hold every channel once.
    assert np.allclose(sorted(channels), np.linspace(260e6, 300e6, 16))


def test_taql_counts_the_rows(ms_set):
    taql = shutil.which("taql")
    if taql is None:
        pytest.skip("casacore-tools' taql is not installed")
    for path in ms_set:
        proc = subprocess.run([taql, f"select from {path} giving as memory"],
                              capture_output=True, text=True, timeout=60)
        rows = 16 * tables.table(str(path / "IOTEST_ROW_CHUNKS"), ack=False).nrows()
        assert f"select result of {rows} rows" in proc.stdout, proc.stdout


def chunk_cells(main, first_rows, chunk, first_channel, time_chunk=16, freq_chunk=8,
                channel_chunks=2):
    """A chunk's cells as DATA holds them: its row chunk's rows x its
    channels (DATA's channel 0 is the file's first), complex64 (this set
    has no chunk on an edge)."""
    row = first_rows[chunk // channel_chunks]
    c0 = (chunk % channel_chunks) * freq_chunk - first_channel
    return main.getcol("DATA", row, time_chunk)[:, c0:c0 + freq_chunk, 0]


def test_a_chunk_s_checksum_is_of_its_cells_as_data_stores_them(iotest, ms_set, tmp_path):
    for path in ms_set:
        main = tables.table(str(path), ack=False)
        layout = json.loads(main.getkeyword("IOTEST_LAYOUT"))
        assert layout["checksum_of"] == "stored cells"
        rows = tables.table(str(path / "IOTEST_ROW_CHUNKS"), ack=False)
        first_rows = dict(zip(rows.getcol("ROW_CHUNK"), rows.getcol("FIRST_ROW")))
        sums = tables.table(str(path / "IOTEST_CHUNKS"), ack=False)
        pairs = list(zip(sums.getcol("CHUNK"), sums.getcol("CRC32")))
        assert len(pairs) > 100
        for chunk, crc in pairs[::37]:
            cells = chunk_cells(main, first_rows, chunk, layout["first_channel"])
            assert cells.dtype == np.complex64 and cells.shape == (16, 8)
            assert zlib.crc32(cells.tobytes()) == crc
    # The last bit of one value of the last file's first chunk changed:
    # verify --all sees it.
    chunk = pairs[0][0]
    row, channel = first_rows[chunk // 2] + 5, (chunk % 2) * 8 + 3 - layout["first_channel"]
    copies = bad_copy(ms_set, tmp_path)
    with tables.table(str(copies[-1]), readonly=False, ack=False) as t:
        cell = t.getcell("DATA", row)
        assert cell[channel, 0] != 0
        bits = cell[channel:channel + 1, 0].view(np.uint32) ^ 1
        cell[channel, 0] = bits.view(np.complex64)[0]
        t.putcell("DATA", row, cell)
    proc = iotest("verify", "--all", *map(str, copies))
    assert proc.returncode == 1 and "1 chunks differ from what their writers wrote" in proc.stdout


def test_an_ms_with_double_precision_checksums_still_verifies(iotest, ms_set, tmp_path):
    # The first ms writer took its CRC-32s of iotest's values (complex128,
    # the conjugates of DATA's) and said nothing of it in IOTEST_LAYOUT.
    copies = bad_copy(ms_set, tmp_path)
    for path in copies:
        with tables.table(str(path), readonly=False, ack=False) as main:
            layout = json.loads(main.getkeyword("IOTEST_LAYOUT"))
            del layout["checksum_of"]
            main.putkeyword("IOTEST_LAYOUT", json.dumps(layout))
            rows = tables.table(str(path / "IOTEST_ROW_CHUNKS"), ack=False)
            first_rows = dict(zip(rows.getcol("ROW_CHUNK"), rows.getcol("FIRST_ROW")))
            with tables.table(str(path / "IOTEST_CHUNKS"), readonly=False, ack=False) as sums:
                first_channel = layout["first_channel"]
                old = [zlib.crc32(np.conj(chunk_cells(main, first_rows, c, first_channel))
                                  .astype(np.complex128).tobytes())
                       for c in sums.getcol("CHUNK")]
                sums.putcol("CRC32", np.array(old, dtype=np.int64))
    proc = iotest("verify", "--all", *map(str, copies), check=0)
    assert ": passed" in proc.stdout


def bad_copy(ms_set, tmp_path):
    copies = []
    for path in ms_set:
        copy = tmp_path / path.name
        shutil.copytree(path, copy)
        copies.append(copy)
    return copies


def one_error_line(proc, *words):
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    for w in words:
        assert w in lines[0], lines[0]


@pytest.mark.parametrize("command", [["verify"], ["read"], ["grid"]])
def test_a_foreign_measurement_set_is_refused(iotest, tmp_path, command):
    foreign = tmp_path / "foreign.ms"
    tables.default_ms(str(foreign)).close()
    proc = iotest(*command, str(foreign))
    one_error_line(proc, str(foreign), "not iotest's")


def test_a_missing_column_is_refused(iotest, ms_set, tmp_path):
    copies = bad_copy(ms_set, tmp_path)
    with tables.table(str(copies[0]), readonly=False, ack=False) as t:
        t.removecols("DATA")
    one_error_line(iotest("verify", *map(str, copies)), str(copies[0]), "no column DATA")


def test_a_truncated_measurement_set_is_refused(iotest, ms_set, tmp_path):
    copies = bad_copy(ms_set, tmp_path)
    (copies[1] / "table.dat").write_bytes((copies[1] / "table.dat").read_bytes()[:100])
    one_error_line(iotest("verify", *map(str, copies)), str(copies[1]))
    # Its checksums' subtable gone: not completely written.
    copies = bad_copy(ms_set, tmp_path / "b") if (tmp_path / "b").mkdir() is None else None
    shutil.rmtree(copies[0] / "IOTEST_CHUNKS")
    one_error_line(iotest("verify", *map(str, copies)), str(copies[0]))


def test_an_ms_option_given_to_another_back_end_is_refused(tmp_path):
    for args in (["--storage=hdf5", "--ms.stman=standard", str(tmp_path / "v%d.h5")],
                 ["--ms.tile=chunk", str(tmp_path / "v%d.bin")],
                 ["--storage=ms", "--ms.tile=0x4", str(tmp_path / "v%d.ms")],
                 ["--storage=ms", "--ms.stman=standard", "--ms.tile=8x8",
                  str(tmp_path / "v%d.ms")]):
        proc = subprocess.run([iotest_binary(), *OBS, *args], capture_output=True, text=True,
                              timeout=MPI_TIMEOUT_S)
        one_error_line(proc, "--ms.")
    assert list(tmp_path.iterdir()) == []  # nothing left behind


def test_a_folder_that_is_no_measurement_set_is_never_replaced(tmp_path):
    mine = tmp_path / "vis0.ms"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    proc = subprocess.run([iotest_binary(), "degrid", *OBS, "--storage=ms", str(mine)],
                          capture_output=True, text=True, timeout=MPI_TIMEOUT_S)
    one_error_line(proc, "OUTPUT", "not a MeasurementSet")
    assert (mine / "notes.txt").read_text() == "mine"


def test_a_standard_storage_manager_set_verifies_too(iotest, tmp_path):
    proc = subprocess.run([iotest_binary(), "degrid", *OBS, "--storage=ms", "--ms.stman=standard",
                           str(tmp_path / "vis.ms")], capture_output=True, text=True,
                          timeout=MPI_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr
    iotest("verify", "--all", str(tmp_path / "vis.ms"), check=0)


def test_a_synthetic_set_reads_back_and_verifies_exactly(iotest, tmp_path):
    # The pattern's values are large integers that single precision rounds:
    # the checks expect them as the MS stores them, and find every one.
    out = str(tmp_path / "vis%d.ms")
    proc = subprocess.run([*MPIRUN, "-np", "2", iotest_binary(), "run", "--synthetic-vis=walk",
                           *OBS, out], capture_output=True, text=True, timeout=MPI_TIMEOUT_S,
                          env=mpi_env())
    assert proc.returncode == 0, proc.stderr
    files = sorted(str(p) for p in tmp_path.glob("vis*.ms"))
    read = iotest("read", "--check", *files, check=0)
    assert "0 wrong" in read.stdout and ": passed" in read.stdout, read.stdout
    assert ": passed" in iotest("verify", "--all", *files, check=0).stdout


# The run (46): T05_ + vlaa at dec -30, 64 channels in 2 frequency
# chunks, 3 ranks (a producer, 2 streamers).
SDP = ["--rec-set=T05_", "--vis-set=vlaa", "--dec=-30", "--time=-230:230/32/16",
       "--freq=260e6:300e6/64/32", "--source-count=10"]


def test_the_sdp_s_layout_a_measurement_set_per_frequency_range(iotest, mpirun, tmp_path):
    """Each of the two MeasurementSets holds all 11,232 (time, baseline)
    rows once, for its own 32 channels; none flagged; the bytes written are
    the data's; verify, read and the imaging direction take the set whole."""
    report = tmp_path / "r.json"
    proc = mpirun(3, *SDP, "--storage=ms", "--no-progress", f"--report={report}",
                  str(tmp_path / "vis%d.ms"), check=0)
    from conftest import load
    r = load(report)
    files = sorted(tmp_path.glob("vis*.ms"))
    assert len(files) == 2
    first = []
    for f in files:
        main = tables.table(str(f), ack=False)
        keys = set(zip(main.getcol("ANTENNA1"), main.getcol("ANTENNA2"), main.getcol("TIME")))
        assert main.nrows() == len(keys) == 351 * 32
        assert not main.getcol("FLAG").any()
        freq = tables.table(str(f / "SPECTRAL_WINDOW"), ack=False).getcol("CHAN_FREQ")[0]
        assert len(freq) == 32
        first.append(freq[0])
        layout = json.loads(main.getkeyword("IOTEST_LAYOUT"))
        assert layout["channels"] == 64 and layout["file_channels"] == 32
    assert np.allclose(sorted(first), [260e6, 260e6 + 32 * 40e6 / 63])
    t = r["transit"]
    assert t["files_split_by"] == "frequency" and t["placement"] == "in situ"
    assert t["chunks_sent"] > 0 and "exchanged between the streamers" in proc.stdout
    # A streamer's chunks for its own file skip MPI (docs/storage.md).
    assert t["chunks_kept"] > 0 and f"{t['chunks_kept']} kept for their own files" in proc.stdout
    c = r["counts"]
    assert c["bytes_written"] == c["visibilities"] * 8 and c["chunks_rewritten"] == 0
    assert "1.000x the visibilities' bytes" in proc.stdout
    names = list(map(str, files))
    assert ": passed" in iotest("verify", "--all", *names, check=0).stdout
    image = tmp_path / "image.json"
    mpirun(3, "run", "--direction=image", "--rec-set=T05_", "--no-progress", f"--report={image}",
           *names, check=0)
    assert load(image)["accuracy"]["facet_rmse"] < 1e-7


def test_in_transit_writer_ranks_write_the_same_layout(iotest, mpirun, tmp_path):
    mpirun(4, *SDP, "--storage=ms", "--writer-ranks=2", "--no-progress",
           str(tmp_path / "vis%d.ms"), check=0)
    files = sorted(map(str, tmp_path.glob("vis*.ms")))
    assert len(files) == 2
    for f in files:
        assert tables.table(f, ack=False).nrows() == 351 * 32
    assert ": passed" in iotest("verify", "--all", *files, check=0).stdout


def test_a_synthetic_set_split_by_frequency_reads_back_right(iotest, mpirun, tmp_path):
    # Every rank streams a synthetic set: two streamers, an output each.
    mpirun(2, *SDP[:-1], "--synthetic-vis", "--storage=ms", "--no-progress",
           str(tmp_path / "syn%d.ms"), check=0)
    files = sorted(map(str, tmp_path.glob("syn*.ms")))
    assert len(files) == 2
    proc = mpirun(2, "read", "--check", *files, check=0)
    assert "0 wrong" in proc.stdout and "passed" in proc.stdout


def test_more_measurement_sets_than_frequency_chunks_is_refused(mpirun, tmp_path):
    proc = mpirun(5, *SDP, "--storage=ms", "--no-progress", str(tmp_path / "vis%d.ms"), check=2)
    lines = proc.stderr.strip().splitlines()
    assert any(l.startswith("iotest: error: --writer-count: 4 ms outputs") for l in lines), lines
    assert not list(tmp_path.glob("vis*"))
