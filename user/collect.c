// SPDX-License-Identifier: GPL-2.0
/*
 * fstrace-collect: loads the fstrace BPF programs, traces one workload (a
 * command it starts, existing pids, or a cgroup) and the block devices under
 * it, and writes one self-describing results file.  Small and static so it can
 * be copied onto a target box that has no Python.
 *
 * main: options (options.c), load and attach (probes.c), start the command,
 * drain the ring buffer until the workload ends, detach, write the header
 * (header.c) and the records (results.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "aggregates.h"
#include "env.h"
#include "expose.h"
#include "header.h"
#include "live.h"
#include "names.h"
#include "probes.h"
#include "procfs.h"
#include "results.h"
#include "stacks.h"
#include "ustack.h"
#include "window.h"
#include "block.skel.h"
#include "requests.skel.h"

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig) { stop_signal = sig; }
/* --exposition: SIGHUP rewrites the file at once (a daemon's "reopen") instead of ending the trace */
static volatile sig_atomic_t hup_signal;
static void on_hup(int sig) { hup_signal = 1; }
/* only here so SIGCHLD ends the tracing loop's wait and the exit time is taken promptly */
static void on_child(int sig) {}

static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list args)
{
	if (level == LIBBPF_DEBUG || getenv("FSTRACE_QUIET_LIBBPF"))
		return 0;
	return vfprintf(stderr, fmt, args);
}

static int handle_record(void *ctx, void *data, size_t size)
{
	if (size >= sizeof(struct fst_io) && ((const __u32 *)data)[0] == FST_REC_IO)
		note_io_stack(((const struct fst_io *)data)->queue_stack);
	/* a process's mappings, for its user stacks, while it still runs */
	if (opt.sample_hz > 0 && size >= sizeof(struct fst_req) && ((const __u32 *)data)[0] == FST_REC_REQ)
		ustack_note_process(((const struct fst_req *)data)->tgid, ((const struct fst_req *)data)->comm);
	struct results *r = ctx;
	if (opt.exposition)
		expose_note_record(data, size);
	if (!r) { /* --exposition without -o: nothing is kept; a request here is missing from the counters */
		if (((const __u32 *)data)[0] == FST_REC_REQ)
			expose_unaggregated_requests++;
		return 0;
	}
	int err = results_add(r, data, size);
	if (opt.interval > 0)
		live_add(data, size);
	if (err)
		die("writing records: %s", strerror(-err));
	return 0;
}

/*
 * The BPF side wakes the reader only when a quarter of the ring buffer is waiting (ring.bpf.h
 * record_submit): the reader's own deadlines drain the rest.  epoll reports the ring only after a wakeup, so a
 * wait that times out is followed by an explicit consume.  50 ms of records stays well under the wakeup threshold
 * (a quarter of FST_RINGBUF_BYTES) even from a warm reader under --records all, whose requests are each recorded.
 *
 * The tracing loop waits longer between drains where it can, up to RB_IDLE_POLL_MS or its next deadline (a
 * --budget window's edge, the live view, the exposition, the expiry walk, --duration): each wakeup costs the
 * collector tens of us of CPU on a VM (about 25 on the 2-core one of docs/overhead.md), and twenty a second were a
 * good part of what always-on tracing costs beside block_rq_done.  Past the threshold the kernel's wakeup drains
 * the ring at once, so a fast stream of records is read in larger batches, not lost.  It keeps RB_POLL_MS where
 * something is read only while it lasts: --pid's processes, which it looks at to stop when they are gone, and
 * with --sample-hz the process of each request record, whose mappings its user stacks are resolved by (under
 * --budget only while windows can record requests; a window's records are drained as soon as its hooks are off).
 * The loop's signals (the command's exit, a stop, SIGHUP) are let in only while it waits (loop_wait), so one
 * that comes while the loop works ends the next wait at once instead of going unseen until a timeout.
 */
#define RB_POLL_MS 50
#define RB_IDLE_POLL_MS 250

static int drain_ring(struct ring_buffer *rb, int timeout_ms)
{
	int n = ring_buffer__poll(rb, timeout_ms);
	if (n < 0)
		return n;
	int m = ring_buffer__consume(rb);
	return m < 0 ? m : n + m;
}

/* the tracing loop's wait: an epoll holding the ring buffer's own (ring_buffer__epoll_fd), and the signal mask
 * it waits under, the process's before the loop blocked its signals */
static struct {
	int epfd;
	sigset_t waiting;
} loop_wait = { .epfd = -1 };

static void loop_wait_begin(struct ring_buffer *rb)
{
	struct epoll_event ev = { .events = EPOLLIN };
	loop_wait.epfd = epoll_create1(EPOLL_CLOEXEC);
	if (loop_wait.epfd < 0 || epoll_ctl(loop_wait.epfd, EPOLL_CTL_ADD, ring_buffer__epoll_fd(rb), &ev))
		die("epoll: %s", strerror(errno));
	sigset_t loop_signals;
	sigemptyset(&loop_signals);
	sigaddset(&loop_signals, SIGCHLD);
	sigaddset(&loop_signals, SIGINT);
	sigaddset(&loop_signals, SIGTERM);
	sigaddset(&loop_signals, SIGHUP);
	sigprocmask(SIG_BLOCK, &loop_signals, &loop_wait.waiting);
}

static void loop_wait_end(void)
{
	sigprocmask(SIG_SETMASK, &loop_wait.waiting, NULL);
	close(loop_wait.epfd);
	loop_wait.epfd = -1;
}

/* up to timeout_ms for the kernel's wakeup of the reader or one of the loop's signals, then the ring drained.  A
 * signal that came while the ring was ready is still pending when epoll_pwait returns its events (the kernel runs
 * handlers only for a wait it ended): let in here, or a stream of records would hold a stop off */
static int loop_wait_drain(struct ring_buffer *rb, int timeout_ms)
{
	struct epoll_event ev;
	if (epoll_pwait(loop_wait.epfd, &ev, 1, timeout_ms, &loop_wait.waiting) < 0) {
		if (errno != EINTR)
			return -errno;
	} else {
		sigset_t pending, blocked;
		if (!sigpending(&pending) && (sigismember(&pending, SIGCHLD) || sigismember(&pending, SIGINT) ||
					      sigismember(&pending, SIGTERM) || sigismember(&pending, SIGHUP))) {
			sigprocmask(SIG_SETMASK, &loop_wait.waiting, &blocked);
			sigprocmask(SIG_SETMASK, &blocked, NULL);
		}
	}
	return ring_buffer__consume(rb);
}

/* how long the tracing loop may wait now: until the first of its deadlines (due, n of them, 0 for a duty it does
 * not have) or a --budget window's edge, and at most RB_IDLE_POLL_MS, or RB_POLL_MS where something is read only
 * while it lasts (above) */
static int loop_wait_ms(__u64 now, const __u64 *due, int n)
{
	bool processes_read = opt.sample_hz > 0 && !window_records_off();
	int ms = opt.nr_pids || processes_read ? RB_POLL_MS : RB_IDLE_POLL_MS;
	for (int i = 0; i < n; i++)
		if (due[i])
			ms = ms_until(now, due[i], ms);
	return window_poll_ms(now, ms);
}

/* the command, started stopped on a pipe (*go: write a byte to let it run) so it is traced from its start */
static pid_t start_command(int *go)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC))
		die("pipe: %s", strerror(errno));
	pid_t child = fork();
	if (child < 0)
		die("fork: %s", strerror(errno));
	if (child == 0) {
		char c;
		close(p[1]);
		/* its own process group, so the whole workload tree (tar | xargs ...) is signalled at the
		 * end, and killed with the collector should the collector die */
		setpgid(0, 0);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		if (read(p[0], &c, 1) != 1)
			_exit(126); /* collector gave up before tracing started */
		execvp(opt.cmd[0], opt.cmd);
		fprintf(stderr, "fstrace-collect: cannot run %s: %s\n", opt.cmd[0], strerror(errno));
		_exit(127);
	}
	close(p[0]);
	setpgid(child, child); /* either side may run first */
	*go = p[1];
	return child;
}

static void install_signals(void)
{
	struct sigaction sc = { .sa_handler = on_child };
	sigaction(SIGCHLD, &sc, NULL);
	struct sigaction sa = { .sa_handler = on_signal };
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	/* a rewrite asked while the programs load must not fail a system call there */
	struct sigaction sh = { .sa_handler = on_hup, .sa_flags = SA_RESTART };
	sigaction(SIGHUP, opt.exposition ? &sh : &sa, NULL);
}

/* the exposition's view of the maps, for expose_write */
struct exposer {
	struct expose_input in;
	struct expose_probes probes[8];
	__u32 sdevs[MAX_DEVS], devs[MAX_DEVS];
	const char *dev_levels[MAX_DEVS];
	bool failing;
};

static void exposer_init(struct exposer *x, struct tracer *t, __u64 t_start_real, const struct diskstat *ds_start)
{
	x->in.maps = (struct expose_maps){
		.req_agg = t->reqs ? bpf_map__fd(t->reqs->maps.req_agg) : -1,
		.agg_keys = t->reqs ? bpf_map__fd(t->reqs->maps.agg_keys) : -1,
		.dev_io = bpf_map__fd(t->blk->maps.dev_io),
		.dev_done = dev_done_fd(t->blk),
		.drops = bpf_map__fd(t->blk->maps.drops),
		.comm_agg = t->reqs && opt.per_comm ? bpf_map__fd(t->reqs->maps.comm_agg) : -1,
		.losses = bpf_map__fd(t->blk->maps.losses),
	};
	if (x->in.maps.comm_agg >= 0) { /* the key every name beyond the map's room is counted under (requests.bpf.c) */
		struct fst_comm_agg_key other = {};
		struct fst_comm_agg *zero = calloc(libbpf_num_possible_cpus(), sizeof(*zero));
		if (!zero || bpf_map_update_elem(x->in.maps.comm_agg, &other, zero, BPF_NOEXIST))
			die("creating the other names' key of comm_agg: %s", strerror(errno));
		free(zero);
	}
	if (nr_probe_groups > N(x->probes))
		abort();
	for (int g = 0; g < nr_probe_groups; g++)
		x->probes[g] = (struct expose_probes){ probe_groups[g].probes, probe_groups[g].n };
	for (int i = 0; i < opt.nr_sdevs; i++)
		x->sdevs[i] = sdev_kdev(i);
	for (int i = 0; i < opt.nr_devs; i++) {
		x->devs[i] = dev_arg_kdev(&opt.devs[i]);
		x->dev_levels[i] = dev_level_name(opt.devs[i].level);
	}
	x->in.groups = x->probes;
	x->in.ngroups = nr_probe_groups;
	x->in.sdevs = x->sdevs;
	x->in.nr_sdevs = opt.nr_sdevs;
	x->in.devs = x->devs;
	x->in.dev_levels = x->dev_levels;
	x->in.nr_devs = opt.nr_devs;
	x->in.ds_start = ds_start;
	x->in.start_time_s = t_start_real / 1e9;
	x->in.agg_keys_given = t->reqs ? &t->reqs->bss->agg_keys_given : NULL;
}

static int expose(struct exposer *x)
{
	return expose_write(opt.exposition, opt.openmetrics, &x->in);
}

/* every interval (unless on demand), or at once on SIGHUP; a full disk must not end an always-on exporter:
 * said once, and once when it recovers */
static void expose_again(struct exposer *x)
{
	int err = expose(x);
	if (err && !x->failing)
		fprintf(stderr, "fstrace-collect: writing %s: %s (retrying at each rewrite)\n", opt.exposition,
			strerror(-err));
	else if (!err && x->failing)
		fprintf(stderr, "fstrace-collect: writing %s works again\n", opt.exposition);
	x->failing = err != 0;
}

static unsigned long long drops_now(struct tracer *t)
{
	int fd = bpf_map__fd(t->blk->maps.drops);
	return percpu_u64(fd, FST_REC_REQ) + percpu_u64(fd, FST_REC_IO);
}

/* drain the ring buffer until the workload ends (command exit, every --pid gone, --duration, a signal) */
static void trace(struct tracer *t, struct ring_buffer *rb, struct results *res, struct exposer *x,
		  struct run_info *ri)
{
	bool child_done = ri->child <= 0;
	__u64 t_start = ri->t_start;
	__u64 last_progress = t_start, last_expire = t_start, last_live = t_start, last_expose = t_start;
	int live_clear = isatty(STDOUT_FILENO);
	/* the loop's periodic duties, each due a period after it last ran: what it waits for and what it runs */
	const __u64 progress_ns = 1000000000ull, live_ns = (__u64)(opt.interval * 1e9),
		    expose_ns = (__u64)(opt.exposition_interval * 1e9), end_ns = t_start + (__u64)(opt.duration * 1e9);
	/* the first wait none: the command may have ended before the loop blocked its signals */
	bool first = true;
	loop_wait_begin(rb);
	while (!stop_signal) {
		__u64 before = now_ns(CLOCK_MONOTONIC);
		const __u64 due[] = { opt.progress ? last_progress + progress_ns : 0, opt.interval > 0 ? last_live + live_ns : 0,
				      opt.exposition ? last_expose + expose_ns : 0, t->plain ? 0 : last_expire + FST_EXPIRE_EVERY_NS,
				      opt.duration > 0 ? end_ns : 0 };
		int err = loop_wait_drain(rb, first ? 0 : loop_wait_ms(before, due, N(due)));
		first = false;
		if (err < 0)
			die("polling ring buffer: %s", strerror(-err));
		__u64 now = now_ns(CLOCK_MONOTONIC);
		if (window_tick(t, now) && (err = ring_buffer__consume(rb)) < 0)
			die("polling ring buffer: %s", strerror(-err));
		if (opt.progress && now - last_progress >= progress_ns) {
			last_progress = now;
			fprintf(stderr, "fstrace-collect: %.0fs  requests %llu  block requests %llu  dropped %llu\n",
				(now - t_start) / 1e9, (unsigned long long)res->spools[FST_REC_REQ].count,
				(unsigned long long)res->spools[FST_REC_IO].count, drops_now(t));
		}
		if (opt.interval > 0 && now - last_live >= live_ns) {
			live_counted(t->reqs ? bpf_map__fd(t->reqs->maps.req_agg) : -1,
				     t->reqs ? bpf_map__fd(t->reqs->maps.agg_keys) : -1);
			live_print(stdout, (now - last_live) / 1e9, drops_now(t), live_clear);
			last_live = now;
		}
		if (opt.exposition && (hup_signal || now - last_expose >= expose_ns)) {
			/* on demand, between scrapes the labels alone follow the devices and their mounts (expose.c) */
			if (hup_signal || !opt.exposition_on_demand)
				expose_again(x);
			else {
				expose_follow_labels(&x->in);
				window_calls_look(now);
			}
			hup_signal = 0;
			last_expose = now;
		}
		if (now - last_expire >= FST_EXPIRE_EVERY_NS && !t->plain) {
			last_expire = now;
			expire_stale(t->blk, &ri->expired);
			expose_expired_bios = ri->expired.bios;
			expose_expired_requests = ri->expired.requests;
		}
		if (!child_done && waitpid(ri->child, &ri->wstatus, WNOHANG) == ri->child) {
			child_done = true;
			ri->t_child_exit = now_ns(CLOCK_MONOTONIC);
		}
		if (ri->child > 0 && child_done)
			break;
		if (ri->child <= 0 && opt.nr_pids) { /* --pid: stop once every traced process is gone */
			bool any = false;
			for (int i = 0; i < opt.nr_pids && !any; i++)
				any = process_alive(opt.pids[i]);
			if (!any)
				break;
		}
		if (opt.duration > 0 && now >= end_ns)
			break;
	}
	loop_wait_end();
	ri->interrupted = stop_signal != 0;
	if (!child_done) {
		kill(-ri->child, SIGTERM); /* the whole workload tree, not only its shell */
		waitpid(ri->child, &ri->wstatus, 0);
		ri->t_child_exit = now_ns(CLOCK_MONOTONIC);
	}
}

/* let I/O the workload started finish, so every request it caused is counted */
static void settle(struct ring_buffer *rb)
{
	for (int tries = 0; tries < 50; tries++) {
		unsigned long long busy = 0;
		for (int i = 0; i < opt.nr_devs; i++)
			if (opt.devs[i].is_loop)
				busy += dev_inflight(&opt.devs[i]);
		if (!busy)
			break;
		drain_ring(rb, 20);
	}
}

/* tracing is attached: the first exposition written, --ready-fd told, and the command let go */
static void announce_ready(struct exposer *x, struct run_info *ri, int go)
{
	int err;
	/* the first exposition exists before "ready": a reader started then finds a complete one */
	if (opt.exposition && (err = expose(x)))
		die("writing --exposition %s: %s", opt.exposition, strerror(-err));
	if (opt.ready_fd >= 0) {
		if (write(opt.ready_fd, "ready\n", 6) != 6) { /* the reader went away: keep tracing */
		}
		close(opt.ready_fd);
	}
	if (ri->child > 0) {
		ri->t_child_go = now_ns(CLOCK_MONOTONIC);
		ri->cpu_go_ns = self_cpu_ns();
		if (write(go, "g", 1) != 1)
			die("starting command: %s", strerror(errno));
		close(go);
	}
}

/* each traced device's diskstats into ds, each read between two reads of block_rq_done's counts of it (ex): a
 * completion the exact count and the kernel's would both take is on one side of the snapshot in both, but for
 * the few the reads straddled */
static void snapshot_devices(int done_fd, struct diskstat *ds, struct diskstat_bracket *ex)
{
	for (int i = 0; i < opt.nr_devs; i++) {
		ex[i].ok = dev_done_read(done_fd, i, &ex[i].at[0]);
		read_diskstat(&opt.devs[i], &ds[i]);
		ex[i].ok = dev_done_read(done_fd, i, &ex[i].at[1]) && ex[i].ok;
	}
}

/* tracing is over: the last window closed, the end's diskstats and exact counts (into ds_end and ex_end, which ri
 * reads) and times taken, the symbols read while the programs are loaded, every probe detached, the ring buffer
 * drained, and the last exposition written */
static void stop_tracing(struct tracer *t, struct ring_buffer *rb, struct exposer *x, struct run_info *ri,
			 struct diskstat *ds_end, struct diskstat_bracket *ex_end)
{
	int err;
	settle(rb);
	/* the last window closed first: the windows' spans, and the exact counts they took, lie inside the
	 * snapshots' (the windowed block estimate scales by the count over the snapshots' span) */
	window_finish();
	snapshot_devices(dev_done_fd(t->blk), ds_end, ex_end);
	ri->t_end = now_ns(CLOCK_MONOTONIC);
	ri->cpu_end_ns = self_cpu_ns();
	if (opt.out && opt.sample_hz > 0)
		tracer_read_ksyms(t);
	tracer_detach();
	while (ring_buffer__consume(rb) > 0)
		;
	if (opt.exposition && (err = expose(x)))
		fprintf(stderr, "fstrace-collect: writing %s: %s\n", opt.exposition, strerror(-err));
	if (ri->expired.run_failures)
		fprintf(stderr, "fstrace-collect: expiring stale in-flight block state failed %llu times (header "
				"expired_in_flight.run_failures): a task may look as if waiting for its own I/O\n",
			ri->expired.run_failures);
}

int main(int argc, char **argv)
{
	parse_args(argc, argv);
	if (geteuid() != 0)
		die("must run as root (loading BPF programs needs CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN)");
	libbpf_set_print(libbpf_print);

	struct results res = {};
	const char *why = NULL;
	int err = opt.out ? results_open(&res, opt.out, &why) : 0;
	if (err)
		die("cannot create results next to %s: %s", opt.out, why ? why : strerror(-err));
	json *meta = header_meta(opt.meta_file);

	int go = -1;
	struct run_info ri = { .child = opt.cmd ? start_command(&go) : -1, .poll_ms = opt.nr_pids ? RB_POLL_MS : RB_IDLE_POLL_MS, .poll_ms_sampled = opt.sample_hz > 0 ? RB_POLL_MS : 0 };
	install_signals();

	/* task records (what delay accounting is for) are not kept without -o: an exporter leaves it as it is */
	bool wants_delayacct = !opt.block_only && opt.out;
	ri.delayacct_was = wants_delayacct ? delayacct_ref(true) : delayacct_set(-1);
	delayacct_held = wants_delayacct;
	atexit(delayacct_release); /* every exit, die() included */
	ri.t_load0 = now_ns(CLOCK_MONOTONIC);
	struct tracer t = {};
	tracer_load(&t);
	tracer_set_filters(&t, ri.child);
	window_prepare(&t); /* before anything is attached */
	struct ring_buffer *rb = ring_buffer__new(bpf_map__fd(t.blk->maps.events), handle_record, opt.out ? &res : NULL,
						  NULL);
	if (!rb)
		die("ring buffer: %s", strerror(errno));
	if (tracer_attach(&t)) {
		if (ri.child > 0) {
			close(go);
			waitpid(ri.child, NULL, 0);
		}
		if (opt.out)
			results_discard(&res);
		die("attach failed; nothing traced");
	}
	ri.t_attached = now_ns(CLOCK_MONOTONIC);

	/* [t_start, t_end] encloses both diskstats snapshots: completions they count fall inside it */
	ri.t_start = now_ns(CLOCK_MONOTONIC);
	ri.t_start_real = now_ns(CLOCK_REALTIME);
	ri.cpu_start_ns = self_cpu_ns();
	struct diskstat ds_start[MAX_DEVS], ds_end[MAX_DEVS];
	static struct diskstat_bracket ex_start[MAX_DEVS], ex_end[MAX_DEVS];
	snapshot_devices(dev_done_fd(t.blk), ds_start, ex_start);
	ri.ds_start = ds_start;
	ri.ds_end = ds_end;
	ri.ex_start = ex_start;
	ri.ex_end = ex_end;
	window_init(&t, ri.t_start); /* --budget: the syscall hooks detached until the first window */

	static struct exposer x;
	exposer_init(&x, &t, ri.t_start_real, ds_start);
	announce_ready(&x, &ri, go);
	trace(&t, rb, &res, &x, &ri);
	stop_tracing(&t, rb, &x, &ri, ds_end, ex_end);
	if (!opt.out) { /* an exporter: its file is the exposition, already final */
		tracer_destroy(&t, rb);
		json_object_put(meta);
		fprintf(stderr, "fstrace-collect: detached\n");
		return 0;
	}

	json *header = header_build(&t, &ri, meta);
	tracer_destroy(&t, rb);
	err = results_finish(&res, header);
	json_object_put(header);
	if (err)
		die("writing %s: %s", opt.out, strerror(-err));
	fprintf(stderr, "fstrace-collect: wrote %s (%llu requests, %llu block requests)\n", opt.out,
		(unsigned long long)res.spools[FST_REC_REQ].count, (unsigned long long)res.spools[FST_REC_IO].count);
	return 0;
}
