# Sourced by every script in bench/ after it has moved to the repository's
# root: what a fresh clone lacks after `make deps` is built here, so that
# each script runs on its own (issue 28: `make deps`, then any script).
# The binary is the native preset's (`make build`), tuned for the machine
# that measures; an existing build/ of another preset is used as it is,
# since reconfiguring it would rebuild everything.
if [ ! -x build/bin/iotest ]; then
  echo "bench: build/bin/iotest is missing; building it (make build)" >&2
  make -s build > /dev/null
fi
