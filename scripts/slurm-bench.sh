#!/bin/sh
# fstrace bench as a Slurm job array: array task I runs shard I/N of the matrix (N: the array's size), and a
# merge job, which Slurm starts only once every task has succeeded (--dependency=afterok), makes one bench
# directory of the shards (docs/bench.md).
#
#   scripts/slurm-bench.sh OUT N BENCH_OPTION...      e.g. scripts/slurm-bench.sh /shared/seed000 8 --preset seed000
#
# prints the array's and the merge's job ids.  OUT must be on a filesystem every node sees: shard I is written to
# OUT.shards/I, its log to OUT.logs/I.log, the merge to OUT (its log OUT.logs/merge.log).  The jobs run as the
# user who submits (root: bench mounts images and loads BPF programs) with this checkout's fstrace, at the same
# path on every node; each task takes its node whole (--exclusive): two benches on one machine would drop each
# other's caches and share its disk.  sbatch's own options come from its SBATCH_* environment variables
# (SBATCH_PARTITION, SBATCH_TIMELIMIT, ...).
set -eu

case "${1:-}" in
--shard-task)  # in an array task: $2 OUT, then bench's options
	out=$2
	shift 2
	exec "$FSTRACE_HOME/fstrace" bench "$@" --shard "$SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT" \
		-o "$out.shards/$SLURM_ARRAY_TASK_ID"
	;;
--merge-task)  # in the merge job: $2 OUT
	exec "$FSTRACE_HOME/fstrace" bench --merge "$2.shards"/* -o "$2"
	;;
esac

if [ $# -lt 3 ]; then
	echo "usage: $0 OUT SHARDS BENCH_OPTION... (e.g. $0 /shared/seed000 8 --preset seed000)" >&2
	exit 2
fi
case "$2" in
'' | *[!0-9]* | 0) echo "$0: SHARDS must be a whole number above 0, got '$2'" >&2; exit 2 ;;
esac
# the jobs find this checkout by FSTRACE_HOME (sbatch runs a copy of this script from its spool)
FSTRACE_HOME=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)
export FSTRACE_HOME
out=$(realpath -m -- "$1")
shards=$2
shift 2
if [ -e "$out" ] || [ -e "$out.shards" ]; then
	echo "$0: $out or $out.shards exists already; choose another OUT" >&2
	exit 2
fi
mkdir -p "$out.shards" "$out.logs"
array=$(sbatch --parsable --export=ALL --exclusive --job-name=fstrace-bench --array="0-$((shards - 1))" \
	--output="$out.logs/%a.log" "$FSTRACE_HOME/scripts/slurm-bench.sh" --shard-task "$out" "$@")
array=${array%%;*}  # --parsable: "id" or "id;cluster"
merge=$(sbatch --parsable --export=ALL --job-name=fstrace-bench-merge --dependency="afterok:$array" \
	--output="$out.logs/merge.log" "$FSTRACE_HOME/scripts/slurm-bench.sh" --merge-task "$out")
echo "${array} ${merge%%;*}"
