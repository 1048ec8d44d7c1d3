"""A real site's ReFrame system for iotest's checks: a template to copy and
fill in. It is loaded after reframe/config.py, whose environments and
logging it reuses (a later file's systems come first, so this one is picked
on its login nodes by `hostnames`):

  reframe -C reframe/config.py -C reframe/site_template.py -c reframe/ -r \
          -S iotest_exe=$(which iotest) -S output_dir=/scratch/$USER/iotest

Every value marked FILL IN is the site's. The checks' reference figures for
this system are the 'site:compute' entries of reframe/iotest_checks.py:
placeholders that log without judging until replaced by what the site
measured (docs/reframe.md, *References*).
"""

site_configuration = {
    'systems': [
        {
            'name': 'site',
            'descr': 'FILL IN: the cluster iotest is measured on',
            # FILL IN: regular expressions of its login nodes' host names.
            'hostnames': [r'^login\d+'],
            # How iotest and its libraries are loaded: 'lmod' or 'tmod4'
            # for environment modules, 'spack' for a Spack installation
            # (modules then name Spack specs), 'nomod' for neither.
            'modules_system': 'lmod',
            # FILL IN: where ReFrame stages jobs and keeps their output; it
            # must be visible from the compute nodes (a shared file system).
            'prefix': '/scratch/$USER/reframe-iotest',
            'partitions': [
                {
                    'name': 'compute',
                    'descr': 'FILL IN: the nodes the benchmark runs on',
                    # 'slurm' where Slurm has accounting (sacct); 'squeue'
                    # where it has none, as on tools/cluster's cluster.
                    'scheduler': 'slurm',
                    # srun under Slurm; 'mpirun' (Open MPI's) inside the
                    # allocation where the site's MPI is not Slurm-aware.
                    'launcher': 'srun',
                    # FILL IN: sbatch options every job gets: the partition,
                    # the account charged, a reservation, constraints.
                    'access': ['--partition=compute', '--account=FILL_IN',
                               '--exclusive'],
                    'environs': ['iotest'],
                    'max_jobs': 4,
                    'time_limit': '30m',
                    # Threads per rank come from the checks' `threads`
                    # variable (0: iotest's default, the node's cores over
                    # its ranks); OpenMP should wait passively.
                    'env_vars': [['OMP_WAIT_POLICY', 'PASSIVE']],
                    'extras': {
                        # Ranks per node of every check (omit: the
                        # scheduler's packing). One per node makes the
                        # checks cross the network.
                        'ranks_per_node': 1,
                        # Launcher options: a rank that dies ends the job
                        # step (not the time limit); add e.g. '--mpi=pmix',
                        # '--cpu-bind=cores'.
                        'launcher_options': ['--kill-on-bad-exit=1'],
                    },
                },
            ],
        },
    ],
    'environments': [
        {
            # iotest as the site provides it: FILL IN the module(s) (or
            # Spack specs with modules_system 'spack', e.g.
            # 'iotest@main %gcc ^openmpi') that put iotest, its MPI and HDF5
            # on the path; then run with -S iotest_exe=iotest (or its full
            # path). Without an installed iotest, list the build's
            # dependencies instead (cmake, a C++20 compiler, MPI, HDF5,
            # FFTW: docs/install.md) and leave iotest_exe empty: the
            # IotestBuild fixture builds it with CMake's release preset.
            'name': 'iotest',
            'modules': ['iotest'],
            'cc': 'gcc',
            'cxx': 'g++',
            'ftn': '',
            'target_systems': ['site'],
        },
    ],
}
