"""ReFrame site configuration for iotest's checks (reframe/iotest_checks.py).

Two systems:

  local     this machine: no batch system, Open MPI's mpirun (--system=local;
            picked on any host that no other system claims)
  vcluster  the virtual cluster of tools/cluster: a real Slurm over three
            hosts (--system=vcluster; run ReFrame on the login side, i.e.
            under `tools/cluster exec` or after `eval "$(tools/cluster env)"`,
            so that sbatch and squeue reach that cluster's Slurm)

A real site starts from reframe/site_template.py, loaded after this file:

  reframe -C reframe/config.py -C reframe/site_template.py -c reframe/ -r

docs/reframe.md says how to run the checks on each of them.
"""
import os

# The checks live next to this file: with this configuration `-c reframe/`
# may be left out.
CHECKS = os.path.dirname(os.path.abspath(__file__))

# ReFrame's stage and output folders and performance log go under
# out/reframe/ of the folder it runs from (--prefix moves them): out/ is
# where iotest's own runs write, which git ignores, so a run from the
# sources leaves nothing else behind.
PREFIX = os.path.join('out', 'reframe')

# What iotest's own tests set for MPI jobs on one host (tests/cli/conftest.py):
# containers often forbid the cross-memory attach Open MPI tries first, and
# busy-waiting OpenMP threads steal the few cores from the other ranks.
ONE_HOST_MPI_ENV = [
    ['OMPI_MCA_btl_vader_single_copy_mechanism', 'none'],
    ['OMP_WAIT_POLICY', 'PASSIVE'],
]

site_configuration = {
    'systems': [
        {
            'name': 'vcluster',
            'descr': "tools/cluster's virtual cluster: Slurm on node1..node3 "
                     "(docs/cluster.md)",
            # Its login side is this machine: only --system=vcluster picks it.
            'hostnames': [],
            'modules_system': 'nomod',
            # Run from the shared folder: the hosts run the jobs in it.
            'prefix': PREFIX,
            'partitions': [
                {
                    'name': 'cluster',
                    'descr': "Slurm's one partition, every host",
                    # No Slurm accounting there (AccountingStorageType=none):
                    # squeue, not sacct, follows the jobs.
                    'scheduler': 'squeue',
                    # srun starts the ranks through Slurm's PMIx
                    # (MpiDefault=pmix), as on a production cluster.
                    'launcher': 'srun',
                    'access': ['--partition=cluster'],
                    'environs': ['gnu'],
                    # The hosts share this machine's cores: a few jobs at once
                    # (eight at once made Open MPI's TCP connections time out).
                    'max_jobs': 3,
                    # The checks take under a minute; a hung job ends sooner.
                    'time_limit': '3m',
                    'env_vars': [['OMP_WAIT_POLICY', 'PASSIVE']],
                    'extras': {
                        # One rank per host, so that every check crosses
                        # the hosts' network (TCP between namespaces).
                        'ranks_per_node': 1,
                        # A rank that dies ends the job step at once, not at
                        # the time limit with the others waiting on it.
                        'launcher_options': ['--kill-on-bad-exit=1'],
                    },
                },
            ],
        },
        {
            'name': 'local',
            'descr': 'This machine: Open MPI mpirun, no batch system',
            'hostnames': ['.*'],
            'modules_system': 'nomod',
            'prefix': PREFIX,
            'partitions': [
                {
                    'name': 'default',
                    'descr': 'mpirun on this host',
                    'scheduler': 'local',
                    'launcher': 'mpirun',
                    'environs': ['gnu'],
                    # The checks are MPI jobs of 2 or 3 ranks on a machine of
                    # a few cores: one at a time, so that each one's figures
                    # are its own.
                    'max_jobs': 1,
                    'env_vars': ONE_HOST_MPI_ENV,
                    'extras': {
                        # Open MPI refuses root unless told, and more ranks
                        # than cores unless told (CI runs as root on 2 cores).
                        'launcher_options': ['--allow-run-as-root', '--oversubscribe'],
                    },
                },
            ],
        },
    ],
    'environments': [
        {
            # The system's GNU compilers: the build fixture hands them to
            # CMake; an installed iotest (-S iotest_exe=...) needs nothing.
            'name': 'gnu',
            'cc': 'gcc',
            'cxx': 'g++',
            'ftn': '',
        },
    ],
    'logging': [
        {
            'level': 'debug',
            'handlers': [
                {
                    'type': 'stream',
                    'name': 'stdout',
                    'level': 'info',
                    'format': '%(message)s',
                },
            ],
            'handlers_perflog': [
                {
                    # One file per check and system:partition under the
                    # perflog directory (--perflogdir, default ./perflogs):
                    # a header line, then one line a run with every
                    # performance variable as NAME=VALUE|UNIT|ref|lower|upper.
                    'type': 'filelog',
                    'prefix': '%(check_system)s/%(check_partition)s',
                    'level': 'info',
                    'format': (
                        '%(check_job_completion_time)s|reframe %(version)s|'
                        '%(check_display_name)s|%(check_system)s:%(check_partition)s|'
                        '%(check_environ)s|jobid=%(check_jobid)s|'
                        '%(check_perfvalues)s|%(check_result)s'
                    ),
                    'format_perfvars': (
                        '%(check_perf_var)s=%(check_perf_value)s|%(check_perf_unit)s|'
                        'ref=%(check_perf_ref)s|%(check_perf_lower_thres)s|'
                        '%(check_perf_upper_thres)s|'
                    ),
                    'append': True,
                },
            ],
        },
    ],
    'general': [
        {
            'check_search_path': [CHECKS],
            # Jobs' output that a failed check leaves in its stage folder is
            # what one needs to see why; the rest go once they pass.
            'keep_stage_files': False,
        },
    ],
}
