"""iotest's ReFrame checks (issue 28).

Each check runs one of the questions of docs/guide.md as a batch job and
judges it from iotest's JSON report (docs/report.md):

  IotestPredict   the predict pipeline end to end: `iotest run` writes the
                  visibilities, `iotest verify` re-reads and checks them
  IotestStorage   storage alone (--synthetic-vis) per back-end: the write,
                  then `iotest read --check` reads it back, then verify --all
  IotestNet       the interconnect: `iotest net`, MPI and TCP
  IotestImaging   the imaging direction (--direction=image, and both: the
                  self-calibration cycle) reading a predict run's files
  IotestScale     the scaling study: `iotest scale` at several rank counts

Sanity, for every check: each report validates against
docs/report.schema.json, each command exited 0, the accuracy figures are
within `tolerance` and every verify or read check passed. Performance: the
report's rates, against a `reference` per system:partition.

The observation is small by default (T05_ with the VLA-A layout, 16 times
by 32 channels: seconds on two cores); the variables below change it, e.g.
`-S rec_set=small -S vis_set=lowbd2 -S time=` (empty: the vis-set's own)
or `-P rec_set=T05_,tiny` for one check per value. docs/reframe.md has the
whole list, how to run them locally, on tools/cluster's virtual cluster and
at a site.
"""
import json
import os
import shlex
import shutil

import reframe as rfm
import reframe.utility.sanity as sn
import reframe.utility.typecheck as typ
from reframe.core.backends import getlauncher
from reframe.core.builtins import (fixture, parameter, performance_function, run_after,
                                   run_before, sanity_function, variable)
from reframe.core.exceptions import SanityError

# The iotest sources these checks came with (reframe/ is one of its folders).
SOURCES = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---- reading the reports ------------------------------------------------------


def _load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise SanityError(f'{os.path.basename(path)} was not written (the command that writes '
                          f'it failed: see the job output)') from None
    except json.JSONDecodeError as e:
        raise SanityError(f'{path} is not JSON: {e}') from None


@sn.deferrable
def report_value(path, field):
    """A figure of an iotest report: `field` is its dotted path
    ('rates.vis_per_s', 'net.pairs.0.mpi'). A figure the report leaves out
    or gives as null (not measured) fails the check, naming it."""
    value = _load_json(path)
    for key in field.split('.'):
        try:
            value = value[int(key)] if isinstance(value, list) else value[key]
        except (KeyError, IndexError, ValueError, TypeError):
            raise SanityError(f'{os.path.basename(path)} has no {field}') from None
    if value is None:
        raise SanityError(f'{os.path.basename(path)}: {field} was not measured (null)')
    return value


@sn.deferrable
def report_is_valid(path, schema_path, mode):
    """The report follows the schema (docs/report.schema.json) and is the
    command's own (`mode`)."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import best_match
    report = _load_json(path)
    error = best_match(Draft202012Validator(_load_json(schema_path)).iter_errors(report))
    if error is not None:
        where = ''.join(f'[{p}]' if isinstance(p, int) else f'.{p}' for p in error.absolute_path)
        raise SanityError(f'{os.path.basename(path)} breaks the report schema at '
                          f'report{where}: {error.message}')
    if report.get('mode') != mode:
        raise SanityError(f"{os.path.basename(path)} is a {report.get('mode')!r} report, "
                          f'expected {mode!r}')
    return True


def _check_exit_status(stdout, stderr, command):
    statuses = sn.evaluate(sn.extractall(rf'^iotest {command}: exit status (\d+)$', stdout, 1,
                                         int))
    if not statuses:
        raise SanityError(f'iotest {command} did not run (no exit status in the job output)')
    if statuses[-1] != 0:
        with open(stderr) as f:
            errors = [line.strip() for line in f if line.startswith('iotest:')]
        raise SanityError(f'iotest {command} exited with status {statuses[-1]}'
                          + (f': {errors[-1]}' if errors else ''))


@sn.deferrable
def exited_zero(stdout, stderr, command):
    """The job script echoes `iotest COMMAND: exit status N` after each
    command; anything but 0 fails, with iotest's own error line."""
    _check_exit_status(stdout, stderr, command)
    return True


@sn.deferrable
def verification_passed(stdout, stderr, path):
    """`iotest verify` held: every chunk present, the samples (or with
    --all every value and checksum) right. Its report says why not; without
    one (a file it could not read), its exit status and error line do."""
    if os.path.exists(path):
        v = _load_json(path).get('verification', {})
        if not v.get('passed'):
            raise SanityError(f"iotest verify failed: {v.get('reason') or 'no reason given'}")
        if v.get('chunks_present') != v.get('chunks_expected'):
            raise SanityError(f"iotest verify: {v.get('chunks_present')} chunks of "
                              f"{v.get('chunks_expected')}")
    _check_exit_status(stdout, stderr, 'verify')
    return True


@sn.deferrable
def within_tolerance(path, field, tolerance, may_be_null=False):
    """An accuracy figure (relative RMSE against the direct transform) at
    or below the tolerance; `may_be_null` for a figure that is null when
    there was nothing to measure (a residual that is exactly zero)."""
    value = _load_json(path)
    for key in field.split('.'):
        value = value.get(key) if isinstance(value, dict) else None
    if value is None:
        if may_be_null:
            return True
        raise SanityError(f'{os.path.basename(path)}: {field} was not measured')
    if not value <= tolerance:
        raise SanityError(f'{os.path.basename(path)}: {field} = {value:.3g} > tolerance '
                          f'{tolerance:.3g}')
    return True


@sn.deferrable
def read_back_passed(path):
    """`iotest read --check`: every value read equals the synthetic pattern."""
    r = _load_json(path).get('read', {})
    if not r.get('checked') or not r.get('passed') or r.get('values_wrong', 1) != 0:
        raise SanityError(f"iotest read --check failed: {r.get('values_wrong')} wrong values"
                          + (f" (first: {r['first_wrong']})" if r.get('first_wrong') else ''))
    return True


@sn.deferrable
def net_figure(path, transport, figure, at):
    """One `iotest net` figure over every pair (their mean), at the first
    (at=0) or last (at=-1) message size."""
    pairs = _load_json(path)['net']['pairs']
    values = [p[transport][at][figure] for p in pairs if p.get(transport)]
    if not values:
        raise SanityError(f'{os.path.basename(path)}: no {transport} figures')
    return sum(values) / len(values)


@sn.deferrable
def scale_peak(path, figure):
    """The study's best point for a figure (visibilities or bytes per s)."""
    values = [p[figure] for p in _load_json(path)['scale']['points'] if p[figure] is not None]
    if not values:
        raise SanityError(f'{os.path.basename(path)}: no point measured {figure}')
    return max(values)


@sn.deferrable
def scale_efficiency(path, stage):
    """The fitted efficiency X(N) / (N gamma) of a stage at the largest N."""
    for fit in _load_json(path)['scale']['fits']:
        if fit['stage'] == stage and fit['efficiency'] is not None:
            return fit['efficiency']
    raise SanityError(f'{os.path.basename(path)}: no fit of the {stage!r} stage')


# ---- references ---------------------------------------------------------------

# Bounds are generous on purpose: this machine and the virtual cluster share
# two cores with whatever else runs (CI runs two test suites at once), so a
# check fails on a rate only when it is a tenth of what they usually give,
# on a latency only when it is 20 to 100 times (a rank waiting for a core
# stretches a round trip that much). The virtual cluster's hosts are
# namespaces of one machine: its figures are placement and protocol checks,
# not speed. A site puts its own measured figures under its system:partition
# (reframe/site_template.py: 'site:compute' here is the placeholder it
# replaces) with tighter bounds, e.g. -0.2.
def at_least(value, unit, lower=-0.9):
    return (value, lower, None, unit)


def at_most(value, unit, upper=9.0):
    return (value, None, upper, unit)


def placeholder(unit):
    """No bounds: the figure is logged, never judged, until the site
    measures its own."""
    return (0, None, None, unit)


# ---- the binary ---------------------------------------------------------------


class IotestBuild(rfm.CompileOnlyRegressionTest):
    """The iotest the checks run: an installed one (`-S iotest_exe=PATH`,
    e.g. from a module or a Spack view), only checked to run; otherwise
    built from `source_dir` with CMake's `release` preset (portable:
    IOTEST_ARCH=generic) in this fixture's stage folder."""
    descr = 'iotest: the installed binary, or a release build of the sources'
    valid_systems = ['*']
    valid_prog_environs = ['*']
    # Nothing is copied to the stage folder: CMake reads the sources where
    # they are (the .venv and build folders next to them stay out).
    sourcesdir = None
    build_system = 'CustomBuild'
    build_time_limit = '30m'

    #: iotest as the compute nodes find it; empty: build it.
    iotest_exe = variable(str, value='')
    #: The sources to build (the checks' own by default).
    source_dir = variable(str, value=SOURCES)
    #: More CMake options, e.g. ['-DIOTEST_ARCH=native'].
    cmake_options = variable(typ.List[str], value=[])
    #: Parallel build jobs (0: the build host's cores).
    build_jobs = variable(int, value=0)

    @run_before('compile')
    def set_build_commands(self):
        if self.iotest_exe:
            self.build_system.commands = [f'{shlex.quote(self.iotest_exe)} --version']
            return
        options = ['--preset', 'release', '-DIOTEST_BUILD_TESTS=OFF']
        # The environment's compilers (the gnu one of reframe/config.py: gcc, g++).
        if self.current_environ.cxx:
            options.append(f'-DCMAKE_CXX_COMPILER={self.current_environ.cxx}')
        if self.current_environ.cc:
            options.append(f'-DCMAKE_C_COMPILER={self.current_environ.cc}')
        options += self.cmake_options
        jobs = self.build_jobs or '$(nproc)'
        self.build_system.commands = [
            # -B puts the preset's build folder (build/ of the sources) here.
            f'cmake -S {shlex.quote(self.source_dir)} -B build '
            + ' '.join(shlex.quote(o) for o in options),
            f'cmake --build build -j {jobs}',
            'build/bin/iotest --version',
        ]

    @sanity_function
    def it_runs(self):
        # `iotest --version` prints the version and its commit
        # ("0.1.0 (4f0c30f53a26)").
        return sn.assert_found(r'^v?\d+\.\d+\.\d+ \([0-9a-z-]+\)\s*$', self.stdout,
                               msg='iotest --version printed no version')

    @property
    def path(self):
        """The binary, absolute."""
        if self.iotest_exe:
            return self.iotest_exe
        return os.path.join(self.stagedir, 'build', 'bin', 'iotest')

    @property
    def schema(self):
        """docs/report.schema.json: the sources', or where `cmake --install`
        put it next to an installed binary (PREFIX/share/iotest)."""
        if self.iotest_exe:
            installed = os.path.join(os.path.dirname(os.path.realpath(self.iotest_exe)),
                                     '..', 'share', 'iotest', 'report.schema.json')
            if os.path.exists(installed):
                return os.path.normpath(installed)
        return os.path.join(self.source_dir, 'docs', 'report.schema.json')


# ---- what every check shares --------------------------------------------------


class IotestCheck(rfm.RunOnlyRegressionTest):
    """An iotest job: the binary from the fixture, the observation from the
    variables, the reports in the stage folder."""
    valid_systems = ['*']
    valid_prog_environs = ['*']
    sourcesdir = None
    tags = {'iotest'}
    maintainers = ['iotest']
    iotest = fixture(IotestBuild, scope='environment')
    #: An installed iotest (the fixture's variable too: -S sets both).
    iotest_exe = variable(str, value='')

    # The job: a recombination set and a visibility set (docs/cli.md).
    #: --rec-set: T05_ tiny small smallish medium large tremendous huge, or N-yN-yB.
    rec_set = variable(str, value='T05_')
    #: --vis-set: lowbd2 lowbd2-core lowr3 lowr4 low-aa0.5 midr5 mkatplus askap lofar vlaa.
    vis_set = variable(str, value='vlaa')
    #: --time: hour angles START:END/STEPS[/CHUNK] in s (empty: the vis-set's).
    time = variable(str, value='-1800:1800/16/8')
    #: --freq: frequencies START:END/STEPS[/CHUNK] in Hz (empty: the vis-set's).
    freq = variable(str, value='260e6:300e6/32/16')
    #: --dec: the phase centre's declination in degrees (empty: the vis-set's).
    dec = variable(str, value='-40')
    #: --source-count: unit point sources of the sky.
    source_count = variable(int, value=10)
    #: --threads per rank (0: iotest's default, the node's cores over its ranks).
    threads = variable(int, value=1)
    #: More options for every `iotest run` of the check, e.g. ['--assigner'].
    run_options = variable(typ.List[str], value=[])
    #: Where the outputs go: relative to the stage folder, or a file system
    #: to measure (/scratch/me/iotest); the check empties its own folder there.
    output_dir = variable(str, value='out')
    #: Largest relative RMSE against the direct transform a check passes.
    tolerance = variable(float, value=1e-6)

    @run_after('setup')
    def place_ranks(self):
        """The partition's layout (reframe/config.py, extras): ranks per
        node, and what the launcher needs there (mpirun as root)."""
        extras = self.current_partition.extras
        if extras.get('ranks_per_node'):
            self.num_tasks_per_node = extras['ranks_per_node']
        self.job.launcher.options += extras.get('launcher_options', [])

    @property
    def binary(self):
        return shlex.quote(self.iotest_exe or self.iotest.path)

    @property
    def launch(self):
        """The partition's launcher line (mpirun -np N ..., srun), for the
        commands before and after the job's own."""
        # The job takes the check's rank count only when it runs; the
        # launcher line is wanted before.
        self.job.num_tasks = self.num_tasks
        return self.job.launcher.run_command(self.job)

    @property
    def outputs(self):
        """This check's output folder."""
        if os.path.isabs(self.output_dir):
            return os.path.join(self.output_dir, self.unique_name)
        return self.output_dir

    def observation(self):
        options = [f'--rec-set={self.rec_set}']
        if self.vis_set:
            options.append(f'--vis-set={self.vis_set}')
            for name in ('time', 'freq', 'dec'):
                if getattr(self, name):
                    options.append(f'--{name}={getattr(self, name)}')
        return options

    def job_options(self):
        """Every `iotest run` of the check: the observation, the sky, no
        progress line (a log file), threads."""
        options = [*self.observation(), f'--source-count={self.source_count}', '--no-progress']
        if self.threads:
            options.append(f'--threads={self.threads}')
        return options + self.run_options

    def fresh_outputs(self):
        """A clean output folder: nothing of an earlier run is verified."""
        folder = shlex.quote(self.outputs)
        return [f'rm -rf {folder}', f'mkdir -p {folder}']

    @staticmethod
    def status(command):
        """Echoes the last command's exit status, for `exited_zero`."""
        return f'echo "iotest {command}: exit status $?"'

    def verify(self, files, run_report, *options):
        """`iotest verify` of the files of the run whose report is
        `run_report`, as that run's (its config.nonce: a file another run
        left there fails), with its own report, verify.json."""
        nonce = (f'nonce=$(grep -o \'"nonce": *[0-9]*\' {run_report} | head -n 1 | '
                 'grep -o \'[0-9]*$\')')
        return [nonce,
                f'{self.binary} verify {files} --tolerance={self.tolerance} '
                + ' '.join(options) + ' ${nonce:+--nonce=$nonce} --report=verify.json',
                self.status('verify')]

    def valid(self, report, mode):
        return report_is_valid(os.path.join(self.stagedir, report), self.iotest.schema, mode)

    def report(self, name):
        return os.path.join(self.stagedir, name)

    @run_before('cleanup')
    def remove_outputs(self):
        """Outputs on a file system of the site's go once the check passed
        (a failed one keeps them, as its stage folder)."""
        if os.path.isabs(self.output_dir):
            shutil.rmtree(self.outputs, ignore_errors=True)


# Output names per back-end: one file per writer (%d), or one shared file.
OUTPUT_NAMES = {'hdf5': 'vis%d.h5', 'posix': 'vis%d.bin', 'phdf5': 'vis.h5', 'ms': 'vis%d.ms'}


# ---- the checks ---------------------------------------------------------------


@rfm.simple_test
class IotestPredict(IotestCheck):
    """The predict pipeline end to end: producers, streamers and writers
    under the launcher write the visibilities, then `iotest verify` checks
    every chunk's presence and checksum and sampled visibilities against
    the direct transform of the sky. A verify that fails fails the check;
    `-S corrupt_output=1` makes it fail on purpose (64 KiB of one file
    overwritten between the run and verify), to show that it does."""
    descr = 'iotest run, then iotest verify: the predict pipeline end to end'
    num_tasks = 3
    #: --storage of the run: hdf5 (UVH5 per writer), posix or phdf5.
    backend = variable(str, value='hdf5')
    #: verify --all: every chunk's checksum, not only the sampled visibilities.
    verify_all = variable(typ.Bool, value=True)
    #: Overwrite 64 KiB of one output with random bytes before verify: the
    #: check must then fail (docs/reframe.md, tests/cli/test_reframe.py).
    corrupt_output = variable(typ.Bool, value=False)

    reference = {
        'local:default': {
            'vis_rate': at_least(1.0, 'Mvis/s'),
            'write_bw': at_least(0.3, 'GB/s'),
            'net_bw': at_least(0.08, 'GB/s'),
            'subgrid_rate': at_least(100.0, 'subgrids/s'),
        },
        'vcluster:cluster': {
            'vis_rate': at_least(0.5, 'Mvis/s'),
            'write_bw': at_least(0.05, 'GB/s'),
            'net_bw': at_least(0.04, 'GB/s'),
            'subgrid_rate': at_least(50.0, 'subgrids/s'),
        },
        'site:compute': {
            'vis_rate': placeholder('Mvis/s'),
            'write_bw': placeholder('GB/s'),
            'net_bw': placeholder('GB/s'),
            'subgrid_rate': placeholder('subgrids/s'),
        },
    }

    @run_before('run')
    def set_commands(self):
        name = OUTPUT_NAMES.get(self.backend, 'vis%d')
        self.executable = self.binary
        self.executable_opts = ['run', *self.job_options(), f'--storage={self.backend}',
                                '--report=run.json', shlex.quote(f'{self.outputs}/{name}')]
        self.prerun_cmds = self.fresh_outputs()
        files = f'{shlex.quote(self.outputs)}/vis*'
        self.postrun_cmds = [self.status('run')]
        if self.corrupt_output:
            # 64 KiB two thirds into the first file: visibility data in
            # every back-end's layout (the headers come first, the
            # checksums last), which verify --all reads back.
            self.postrun_cmds += [
                f'victim=$(ls {files} | head -n 1)',
                'at=$(( $(stat -c %s "$victim") * 2 / 3 / 4096 ))',
                'dd if=/dev/urandom of="$victim" bs=4096 seek=$at count=16 conv=notrunc '
                'status=none',
                'echo "corrupt_output: overwrote 64 KiB of $victim at $((at * 4096))"',
            ]
        self.postrun_cmds += self.verify(files, 'run.json',
                                         *(['--all'] if self.verify_all else []))
        self.keep_files = ['run.json', 'verify.json']

    @sanity_function
    def validate(self):
        return sn.all([
            exited_zero(self.stdout, self.stderr, 'run'),
            self.valid('run.json', 'run'),
            within_tolerance(self.report('run.json'), 'accuracy.vis_rmse', self.tolerance),
            verification_passed(self.stdout, self.stderr, self.report('verify.json')),
            self.valid('verify.json', 'verify'),
            within_tolerance(self.report('verify.json'), 'accuracy.vis_rmse', self.tolerance),
        ])

    @performance_function('Mvis/s')
    def vis_rate(self):
        """Visibilities degridded and written per second of streaming."""
        return report_value(self.report('run.json'), 'rates.vis_per_s') / 1e6

    @performance_function('GB/s')
    def write_bw(self):
        """Bytes written over the back-end's seconds, syncs included."""
        return report_value(self.report('run.json'), 'rates.write_bytes_per_s') / 1e9

    @performance_function('GB/s')
    def net_bw(self):
        """Contribution bytes the producers sent the streamers."""
        return report_value(self.report('run.json'), 'rates.net_bytes_per_s') / 1e9

    @performance_function('subgrids/s')
    def subgrid_rate(self):
        """Subgrids assembled per second of streaming."""
        return report_value(self.report('run.json'), 'rates.subgrids_per_s')


@rfm.simple_test
class IotestStorage(IotestCheck):
    """Storage alone, per back-end: --synthetic-vis writes the real run's
    chunks with a pattern (no producers, no degridding), `iotest read
    --check` reads them back under the launcher checking every value, and
    `iotest verify --all` checks every chunk against its checksum."""
    descr = 'iotest --synthetic-vis write, iotest read --check, verify --all'
    num_tasks = 2
    #: The storage back-end (--storage).
    backend = parameter(['posix', 'hdf5', 'phdf5', 'ms'])
    #: --synthetic-vis order: walk (as the pipeline completes chunks) or
    #: sequential (file order: the storage's ceiling, as IOR writes).
    synthetic_order = variable(str, value='walk')
    #: read --drop-caches (root only): read from the storage, not the page cache.
    drop_caches = variable(typ.Bool, value=False)

    @staticmethod
    def references(local_write, cluster_write):
        return {
            'local:default': {
                'write_bw': at_least(local_write, 'GB/s'),
                'read_bw': at_least(1.0, 'GB/s'),
            },
            'vcluster:cluster': {
                'write_bw': at_least(cluster_write, 'GB/s'),
                'read_bw': at_least(0.5, 'GB/s'),
            },
            'site:compute': {
                'write_bw': placeholder('GB/s'),
                'read_bw': placeholder('GB/s'),
            },
        }

    # phdf5's MPI-IO between the hosts is the slowest: 10-25 MB/s.
    reference = references.__func__(0.3, 0.02)

    @run_after('init')
    def lower_the_ms_write_floor(self):
        """casacore spends about 30 us in each chunk's puts, the other
        back-ends 2: with this check's 1 KiB chunks (8 x 16 visibilities)
        the ms variant writes at ~0.03 GB/s here (bench/README.md,
        MeasurementSets), so its floor is its own."""
        if self.backend == 'ms':
            self.reference = self.references(0.01, 0.01)

    @run_before('run')
    def set_commands(self):
        self.executable = self.binary
        self.executable_opts = [
            'run', f'--synthetic-vis={self.synthetic_order}', *self.job_options(),
            f'--storage={self.backend}', '--report=write.json',
            shlex.quote(f'{self.outputs}/{OUTPUT_NAMES[self.backend]}')]
        self.prerun_cmds = self.fresh_outputs()
        files = f'{shlex.quote(self.outputs)}/vis*'
        read = f'{self.launch} {self.binary} read {files} --check --report=read.json'
        if self.drop_caches:
            read += ' --drop-caches'
        self.postrun_cmds = [self.status('run'), read, self.status('read'),
                             *self.verify(files, 'write.json', '--all')]
        self.keep_files = ['write.json', 'read.json', 'verify.json']

    @sanity_function
    def validate(self):
        return sn.all([
            exited_zero(self.stdout, self.stderr, 'run'),
            self.valid('write.json', 'run'),
            exited_zero(self.stdout, self.stderr, 'read'),
            self.valid('read.json', 'read'),
            read_back_passed(self.report('read.json')),
            verification_passed(self.stdout, self.stderr, self.report('verify.json')),
            self.valid('verify.json', 'verify'),
        ])

    @performance_function('GB/s')
    def write_bw(self):
        """Bytes written over the back-end's seconds, syncs included."""
        return report_value(self.report('write.json'), 'rates.write_bytes_per_s') / 1e9

    @performance_function('GB/s')
    def read_bw(self):
        """Bytes read back over the reading phase (barrier to barrier)."""
        return report_value(self.report('read.json'), 'read.bytes_per_s') / 1e9


@rfm.simple_test
class IotestNet(IotestCheck):
    """The interconnect, as OSU's latency and bandwidth tests: pairs of
    ranks (one per node where there are several) over MPI and over TCP
    between the same processes; --check compares every byte of extra
    messages. Latency at the smallest message, bandwidth at the largest."""
    descr = 'iotest net: latency and bandwidth between pairs of ranks, MPI and TCP'
    num_tasks = 2
    #: --max-size: the largest message, whose bandwidth is reported.
    max_size = variable(int, value=1 << 20)
    #: --iterations below 8 KiB (a tenth of them up to 1 MiB).
    iterations = variable(int, value=200)

    reference = {
        'local:default': {
            'mpi_bw': at_least(1.0, 'GB/s'),
            'tcp_bw': at_least(1.0, 'GB/s'),
            # Two ranks on two busy cores: a descheduled rank stretches a
            # round trip by orders of magnitude.
            'mpi_latency': at_most(1.0, 'us', upper=99.0),
            'tcp_latency': at_most(40.0, 'us', upper=24.0),
        },
        'vcluster:cluster': {
            # Between namespaces of one machine, over its bridge; Open MPI's
            # TCP transport polls for every message, on shared cores.
            'mpi_bw': at_least(0.3, 'GB/s'),
            'tcp_bw': at_least(1.0, 'GB/s'),
            'mpi_latency': at_most(500.0, 'us', upper=19.0),
            'tcp_latency': at_most(20.0, 'us', upper=49.0),
        },
        'site:compute': {
            'mpi_bw': placeholder('GB/s'),
            'tcp_bw': placeholder('GB/s'),
            'mpi_latency': placeholder('us'),
            'tcp_latency': placeholder('us'),
        },
    }

    @run_before('run')
    def set_commands(self):
        self.executable = self.binary
        self.executable_opts = ['net', f'--max-size={self.max_size}',
                                f'--iterations={self.iterations}', '--transport=mpi,tcp',
                                '--check', '--report=net.json']
        self.postrun_cmds = [self.status('net')]
        self.keep_files = ['net.json']

    @sanity_function
    def validate(self):
        return sn.all([
            exited_zero(self.stdout, self.stderr, 'net'),
            self.valid('net.json', 'net'),
            sn.assert_true(report_value(self.report('net.json'), 'net.passed'),
                           msg='iotest net --check: a message arrived wrong'),
            sn.assert_eq(report_value(self.report('net.json'), 'net.messages_wrong'), 0),
        ])

    @performance_function('GB/s')
    def mpi_bw(self):
        return net_figure(self.report('net.json'), 'mpi', 'bandwidth_mb_per_s', -1) / 1e3

    @performance_function('GB/s')
    def tcp_bw(self):
        return net_figure(self.report('net.json'), 'tcp', 'bandwidth_mb_per_s', -1) / 1e3

    @performance_function('us')
    def mpi_latency(self):
        return net_figure(self.report('net.json'), 'mpi', 'latency_us', 0)

    @performance_function('us')
    def tcp_latency(self):
        return net_figure(self.report('net.json'), 'tcp', 'latency_us', 0)


@rfm.simple_test
class IotestImaging(IotestCheck):
    """The imaging direction over MPI: a predict run writes the
    visibilities, then the streamers read them back, grid them and send
    each facet's contribution to its producer, which recombines the dirty
    image (--direction=image, checked against the direct adjoint
    transform), or with --direction=both subtract the model first (the
    self-calibration major cycle, whose residual is zero to rounding)."""
    descr = 'iotest run --direction=image|both of a predict run\'s files'
    num_tasks = 3
    #: image (dirty image of the files) or both (the major cycle).
    direction = parameter(['image', 'both'])
    #: --pixel-samples checked against the direct adjoint transform.
    pixel_samples = variable(int, value=64)

    reference = {
        'local:default': {
            'vis_rate': at_least(0.5, 'Mvis/s'),
            'subgrid_rate': at_least(50.0, 'subgrids/s'),
            'read_bw': at_least(0.01, 'GB/s'),
        },
        'vcluster:cluster': {
            'vis_rate': at_least(0.15, 'Mvis/s'),
            'subgrid_rate': at_least(15.0, 'subgrids/s'),
            'read_bw': at_least(0.004, 'GB/s'),
        },
        'site:compute': {
            'vis_rate': placeholder('Mvis/s'),
            'subgrid_rate': placeholder('subgrids/s'),
            'read_bw': placeholder('GB/s'),
        },
    }

    @run_before('run')
    def set_commands(self):
        outputs = shlex.quote(self.outputs)
        # The files to image: a predict run of the same job, under the launcher.
        self.prerun_cmds = [
            *self.fresh_outputs(),
            f'{self.launch} {self.binary} run ' + ' '.join(self.job_options())
            + f' --report=predict.json {outputs}/vis%d.h5',
            self.status('predict'),
        ]
        # The files give the observation and the sky; the rec-set is the job's.
        options = [f'--rec-set={self.rec_set}', '--no-progress',
                   f'--pixel-samples={self.pixel_samples}', *self.run_options]
        if self.threads:
            options.append(f'--threads={self.threads}')
        self.executable = self.binary
        self.executable_opts = ['run', f'--direction={self.direction}', *options,
                                '--report=image.json', f'{outputs}/vis*.h5']
        self.postrun_cmds = [self.status(self.direction)]
        self.keep_files = ['predict.json', 'image.json']

    @sanity_function
    def validate(self):
        checks = [
            exited_zero(self.stdout, self.stderr, 'predict'),
            self.valid('predict.json', 'run'),
            exited_zero(self.stdout, self.stderr, self.direction),
            self.valid('image.json', 'run'),
            sn.assert_eq(report_value(self.report('image.json'), 'config.direction'),
                         self.direction),
            # The dirty image's pixels against the direct adjoint transform;
            # with both, of the residual, which may be exactly zero (null).
            within_tolerance(self.report('image.json'), 'accuracy.facet_rmse', self.tolerance,
                             may_be_null=self.direction == 'both'),
        ]
        if self.direction == 'both':
            checks.append(within_tolerance(self.report('image.json'), 'accuracy.residual_rms',
                                           self.tolerance))
        return sn.all(checks)

    @performance_function('Mvis/s')
    def vis_rate(self):
        """Visibilities gridded per second of streaming."""
        return report_value(self.report('image.json'), 'rates.vis_per_s') / 1e6

    @performance_function('subgrids/s')
    def subgrid_rate(self):
        """Subgrids recombined per second of streaming."""
        return report_value(self.report('image.json'), 'rates.subgrids_per_s')

    @performance_function('GB/s')
    def read_bw(self):
        """The predict run's files read back while gridding."""
        return report_value(self.report('image.json'), 'read.bytes_per_s') / 1e9


@rfm.simple_test
class IotestScale(IotestCheck):
    """The scaling study: `iotest scale` runs the same job at each of
    `ranks` with the partition's launcher (mpirun here, srun inside the
    job's allocation under Slurm), one after another, and fits the
    Universal Scalability Law to every stage (tools/usl.py). The job is
    storage alone (--synthetic-vis) unless `synthetic` is off."""
    descr = 'iotest scale: one job at several rank counts, the USL fitted'
    #: The allocation: the largest of `ranks`.
    num_tasks = 3
    #: --ranks: the rank counts (3 or more of them, for the fit; from 2 up
    #: when `synthetic` is off: a producer and a streamer).
    ranks = variable(str, value='1,2,3')
    #: --n: what N counts (streamers, ranks or nodes).
    scale_by = variable(str, value='streamers')
    #: The job's runs write a synthetic set (storage alone), or predict.
    synthetic = variable(typ.Bool, value=True)
    #: --python for tools/usl.py (empty: iotest's default, the sources' .venv).
    usl_python = variable(str, value='')

    reference = {
        'local:default': {
            'peak_write_bw': at_least(0.3, 'GB/s'),
            # 1 to 3 streamers on two cores: about a third.
            'write_efficiency': at_least(0.3, 'fraction'),
        },
        'vcluster:cluster': {
            'peak_write_bw': at_least(0.15, 'GB/s'),
            'write_efficiency': at_least(0.25, 'fraction'),
        },
        'site:compute': {
            'peak_write_bw': placeholder('GB/s'),
            'write_efficiency': placeholder('fraction'),
        },
    }

    @run_after('setup')
    def launch_runs_from_scale(self):
        """`iotest scale` itself is one process in the allocation; it starts
        each run with the partition's launcher."""
        launcher = self.job.launcher
        # The launcher's program and its rank count flag: srun -n, mpiexec
        # -n, mpirun -np (Open MPI's and Intel MPI's mpirun-* launchers too).
        program, self.np_flag = {'srun': ('srun', '-n'),
                                 'mpiexec': ('mpiexec', '-n')}.get(
                                     launcher.registered_name, ('mpirun', '-np'))
        self.study_launcher = ' '.join([program, *launcher.options])
        self.job.launcher = getlauncher('local')()

    @run_before('run')
    def set_commands(self):
        job = [*self.job_options(), f'{self.outputs}/vis%d.h5']
        if self.synthetic:
            job.insert(0, '--synthetic-vis')
        options = ['scale', f'--ranks={self.ranks}', f'--n={self.scale_by}',
                   f'--launcher={self.study_launcher}', f'--np-flag={self.np_flag}',
                   f'--job={" ".join(job)}', '--out=scale', '--report=scale.json']
        if self.usl_python:
            options.append(f'--python={self.usl_python}')
        self.prerun_cmds = self.fresh_outputs()
        self.executable = self.binary
        self.executable_opts = [shlex.quote(o) for o in options]
        self.postrun_cmds = [self.status('scale')]
        self.keep_files = ['scale.json', 'scale/plots']

    @sanity_function
    def validate(self):
        points = report_value(self.report('scale.json'), 'scale.points')
        return sn.all([
            exited_zero(self.stdout, self.stderr, 'scale'),
            self.valid('scale.json', 'scale'),
            sn.assert_eq(sn.len(points), len(self.ranks.split(',')),
                         msg='iotest scale: {0} runs, expected {1}'),
            sn.assert_true(report_value(self.report('scale.json'), 'scale.fits'),
                           msg='iotest scale fitted no stage'),
        ])

    @performance_function('GB/s')
    def peak_write_bw(self):
        """The best rank count's write rate."""
        return scale_peak(self.report('scale.json'), 'write_bytes_per_s') / 1e9

    @performance_function('fraction')
    def write_efficiency(self):
        """The writing stage's fitted efficiency at the largest N: 1 is
        linear scaling."""
        return scale_efficiency(self.report('scale.json'), 'writing')
