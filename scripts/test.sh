#!/bin/sh
# The test command: installs and builds what is missing, then runs the test suite (as root: the tests
# load BPF programs and mount images on loop devices).
set -eu
here=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)
if [ "$(id -u)" -ne 0 ]; then
	echo "fstrace tests: must run as root (try: sudo ./scripts/test.sh)" >&2
	exit 1
fi
"$here/scripts/setup.sh" --test
cd "$here"
exec "$here/build/venv/bin/python3" -m pytest -p no:cacheprovider "$@"
