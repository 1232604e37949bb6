#!/bin/bash
# Whose are the block completions fstrace reports unseen?  Runs `fstrace run --fs erofs --workload randread`
# RUNS times while two other observers count block_rq_issue and block_rq_complete per device: an ftrace instance
# (the kernel's own trace events) and bpftrace (a BPF program on the classic tracepoints, nothing of fstrace's).
# A completion the kernel did not run BPF programs for is one that ftrace counts and bpftrace misses too; one
# only fstrace misses would be fstrace's own loss.
#   sudo scripts/unseen_completions.sh [RUNS]        (default 6; needs bpftrace)
set -u
RUNS=${1:-6}
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "unseen_completions: must run as root" >&2; exit 1; }
command -v bpftrace >/dev/null || { echo "unseen_completions: bpftrace is not installed (apt-get install bpftrace)" >&2; exit 1; }
T=/sys/kernel/tracing
[ -d $T/instances ] || mount -t tracefs nodev $T
INST=$T/instances/fstrace-unseen-$$
OUT=$(mktemp -d /tmp/fstrace-unseen-XXXXXX)
BT=
cleanup() {
    [ -n "$BT" ] && kill -INT "$BT" 2>/dev/null && wait "$BT" 2>/dev/null
    [ -d "$INST" ] && echo 0 > "$INST/tracing_on" && rmdir "$INST"
    rm -rf "$OUT"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for i in $(seq 1 "$RUNS"); do
    mkdir "$INST"
    echo 65536 > "$INST/buffer_size_kb"
    echo 1 > "$INST/events/block/block_rq_issue/enable"
    echo 1 > "$INST/events/block/block_rq_complete/enable"
    bpftrace -q -e 'tracepoint:block:block_rq_issue { @issue[args->dev >> 20, args->dev & 0xfffff] = count(); }
                    tracepoint:block:block_rq_complete { @complete[args->dev >> 20, args->dev & 0xfffff] = count(); }' \
        > "$OUT/bpftrace" 2>/dev/null &
    BT=$!
    sleep 3  # bpftrace attached
    ./fstrace run --fs erofs --workload randread --no-baseline -o "$OUT/run" >/dev/null 2>"$OUT/err" ||
        { echo "unseen_completions: fstrace run failed: $(tail -1 "$OUT/err")" >&2; exit 1; }
    kill -INT "$BT"; wait "$BT"; BT=
    echo 0 > "$INST/tracing_on"
    awk '{for (k = 1; k < NF; k++) if ($k == "block_rq_issue:" || $k == "block_rq_complete:") print $k, $(k + 1)}' \
        "$INST/trace" | sort | uniq -c > "$OUT/ftrace"
    rmdir "$INST"
    /usr/bin/python3 - "$OUT" "$i" <<'PY'
import json, re, sys
out, i = sys.argv[1], sys.argv[2]
s = json.load(open(out + "/run/summary.json"))
bt = {}
for kind, maj, mnr, n in re.findall(r"@(issue|complete)\[(\d+), (\d+)\]: (\d+)", open(out + "/bpftrace").read()):
    bt[(kind, "%s:%s" % (maj, mnr))] = int(n)
ft = {}
for line in open(out + "/ftrace"):
    n, kind, dev = line.split()
    ft[(kind.rstrip(":").replace("block_rq_", ""), dev.replace(",", ":"))] = int(n)
for name, d in s["devices"].items():
    if d["level"] != "loop":  # the image's device: nothing but the run reads it, so the counts are comparable
        continue
    print("run %s, %s (loop): fstrace saw %d of the %d reads /proc/diskstats counted; request_completion_missed %d; "
          "issued/completed: ftrace %d/%d, bpftrace %d/%d" % (
              i, name, d["requests_in_window"], d["diskstats_delta"]["reads"],
              (s.get("losses") or {}).get("request_completion_missed", 0),
              ft.get(("issue", name), 0), ft.get(("complete", name), 0),
              bt.get(("issue", name), 0), bt.get(("complete", name), 0)))
PY
    rm -rf "$OUT/run"
done
