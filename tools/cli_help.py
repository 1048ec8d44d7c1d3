"""docs/cli.md from the binary itself: every command's --help, grouped,
with its example, so the page cannot drift from the code.

    tools/cli_help.py [--iotest=build/bin/iotest] [--check]

Without --check it writes docs/cli.md; with --check it exits 1 naming the
first command whose help differs from the page (the test suite runs this).
"""
import argparse
import difflib
import os
import subprocess
import sys

COMMANDS = ["run", "plan", "recombine", "degrid", "grid", "read", "verify", "net", "h5",
            "scale", "layout"]
PAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "cli.md")

INTRO = """# The command line

Every command's `--help`, as the binary prints it (made by
`tools/cli_help.py`; `make test` fails when this page and the binary
differ). Options are grouped as in `--help`; the options shared by
several commands (the observation, the sky, the kernel, the queues, the
report) are defined once and mean the same everywhere. Any option can also
come from a TOML file, `--config=FILE` (`key = value`, the option's name
without `--`, a back-end's options as `[posix]` tables or dotted keys; a
`[run]`, `[plan]`, ... table holds one command's settings in a file shared
by several; the command line wins). Every report's
`environment.configuration` is such a file for its own run. The files are
TOML, not YAML: CLI11 reads TOML and INI only. Which command
answers which question: [guide.md](guide.md).
"""


def help_text(iotest, command):
    args = [iotest] + ([command] if command else []) + ["--help"]
    text = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    # The usage line names the binary as it was called.
    return text.replace(iotest, "iotest").rstrip() + "\n"


def page(iotest):
    parts = [INTRO, "## iotest\n\n```\n" + help_text(iotest, None) + "```\n"]
    for command in COMMANDS:
        parts.append(f"## iotest {command}\n\n```\n" + help_text(iotest, command) + "```\n")
    return "\n".join(parts)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="cli_help.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--iotest", default=os.environ.get("IOTEST_BIN", "build/bin/iotest"))
    parser.add_argument("--check", action="store_true",
                        help="compare with docs/cli.md instead of writing it")
    args = parser.parse_args(argv)
    made = page(args.iotest)
    if not args.check:
        with open(PAGE, "w") as f:
            f.write(made)
        return 0
    with open(PAGE) as f:
        written = f.read()
    if written == made:
        return 0
    diff = difflib.unified_diff(written.splitlines(), made.splitlines(), "docs/cli.md",
                                "iotest --help", lineterm="", n=1)
    sys.stderr.write("docs/cli.md is not current (run tools/cli_help.py):\n")
    sys.stderr.write("\n".join(list(diff)[:40]) + "\n")
    return 1


if __name__ == "__main__":
    sys.exit(main())
