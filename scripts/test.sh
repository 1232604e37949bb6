#!/bin/sh
# The test command: installs and builds what is missing, then runs the test suite.
#   test.sh [PYTEST ARGS]               every lane, as root (the tests load BPF programs, mount images on loop
#                                       devices and boot QEMU guests)
#   test.sh --lane LANE [PYTEST ARGS]   one lane of pytest.ini: unit (stored results, fixtures and pure
#                                       functions: runs as any user, in under a minute), bpf or vm (as root)
set -eu
here=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)
lane=""
if [ "${1:-}" = "--lane" ]; then
	lane=${2:-}
	[ $# -ge 2 ] && shift 2 || shift
fi
case "$lane" in
"" | bpf | vm) parts="--test" ;;
unit) parts="unit" ;;
*) echo "fstrace tests: unknown lane '$lane' (unit, bpf or vm)" >&2
	exit 2 ;;
esac
if [ "$lane" != unit ] && [ "$(id -u)" -ne 0 ]; then
	echo "fstrace tests: must run as root (try: sudo ./scripts/test.sh), or only the unit lane:" \
		"./scripts/test.sh --lane unit" >&2
	exit 1
fi
"$here/scripts/setup.sh" $parts
cd "$here"
if [ -n "$lane" ]; then
	set -- -m "$lane" "$@"
fi
exec "$here/build/venv/bin/python3" -m pytest -p no:cacheprovider "$@"
