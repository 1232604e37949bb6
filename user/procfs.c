// SPDX-License-Identifier: GPL-2.0
/*
 * What the collector reads from and writes to the running system outside BPF (procfs.h): /proc/diskstats and
 * in-flight counts of the traced devices, the traced process trees, kernel.task_delayacct, cgroup ids; and
 * the expiry of in-flight block state whose completion never came.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include "env.h"
#include "block.skel.h"
#include "procfs.h"

/* mountinfo writes space, tab, newline and backslash in paths as \ooo */
static void unescape_octal(char *s)
{
	char *d = s;
	while (*s) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' && s[3] >= '0' &&
		    s[3] <= '7') {
			*d++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
			s += 4;
		} else {
			*d++ = *s++;
		}
	}
	*d = 0;
}

/*
 * /proc/self/mountinfo as last read, kept open and read again only once the mount table changed: the kernel then
 * reports POLLPRI on it (fs/proc_namespace.c mounts_poll), which a poll of no wait asks.  Serve's collector
 * labels its devices from it (every interval where the mount table changed, and at each exposition), one whole
 * read per device each time, where the table seldom changes and on a system of containers holds hundreds of
 * mounts.  A change between the poll and the read is in what is
 * read, and reported again at the next poll: it costs a read.  (A directory above a mount point renamed is no
 * change of the table: its label keeps the old path until the table next changes, as a scrape between the two
 * would have had it anyway.)
 */
static struct {
	int fd;
	char *text; /* NUL-terminated */
	size_t cap;
	bool valid;
} mountinfo = { .fd = -1 };

static const char *mountinfo_now(void)
{
	if (mountinfo.fd < 0 && (mountinfo.fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC)) < 0)
		return NULL;
	struct pollfd p = { .fd = mountinfo.fd, .events = POLLPRI };
	if (mountinfo.valid && poll(&p, 1, 0) == 0)
		return mountinfo.text;
	mountinfo.valid = false;
	size_t len = 0;
	if (lseek(mountinfo.fd, 0, SEEK_SET))
		goto reopen;
	for (;;) {
		if (mountinfo.cap - len < 4096) {
			size_t cap = mountinfo.cap ? 2 * mountinfo.cap : 65536;
			char *t = realloc(mountinfo.text, cap);
			if (!t)
				return NULL;
			mountinfo.text = t, mountinfo.cap = cap;
		}
		ssize_t n = read(mountinfo.fd, mountinfo.text + len, mountinfo.cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			goto reopen;
		if (n == 0)
			break;
		len += n;
	}
	mountinfo.text[len] = 0;
	mountinfo.valid = true;
	return mountinfo.text;
reopen: /* this call fails; the next one opens the file again rather than fail as this one did */
	close(mountinfo.fd);
	mountinfo.fd = -1;
	return NULL;
}

/*
 * Whether the mount table changed since mountinfo_now last read it; true too where it cannot be watched.  The
 * poll takes the kernel's report of the change (mounts_poll resets it), so the text is marked stale here and
 * mountinfo_now reads it again at its next use.
 */
bool mount_table_changed(void)
{
	if (!mountinfo.valid) { /* not read yet (or the last read failed): read now, the baseline of the next look */
		mountinfo_now();
		return true;
	}
	struct pollfd p = { .fd = mountinfo.fd, .events = POLLPRI };
	if (poll(&p, 1, 0) == 0)
		return false;
	mountinfo.valid = false;
	return true;
}

bool sdev_mount(__u32 kdev, char *fstype, size_t fstype_len, char *mnt, size_t mnt_len)
{
	const char *text = mountinfo_now();
	if (!text)
		return false;
	char line[8192], path[1024], type[64];
	unsigned major, minor;
	for (const char *at = text, *end; *at; at = *end ? end + 1 : end) {
		end = strchrnul(at, '\n');
		/* a line is parsed on its own copy (sscanf measures the whole string it is given: on the buffer, each
		 * call would go through every mount after it); a longer one is cut, its fields read from its start */
		size_t n = (size_t)(end - at) < sizeof(line) ? (size_t)(end - at) : sizeof(line) - 1;
		memcpy(line, at, n);
		line[n] = 0;
		char *dash = strstr(line, " - ");
		if (!dash || sscanf(line, "%*u %*u %u:%u %*s %1023s", &major, &minor, path) != 3 ||
		    sscanf(dash + 3, "%63s", type) != 1 || FST_KDEV(major, minor) != kdev)
			continue;
		unescape_octal(path);
		snprintf(fstype, fstype_len, "%s", type);
		/* a path too long for mnt is cut after its last whole character, never inside one (a label of
		 * invalid UTF-8 makes Prometheus refuse the whole scrape); an invalid byte counts as one */
		size_t len = 0;
		for (int n; path[len]; len += n) {
			n = utf8_char_len(path + len);
			n = n ? n : 1;
			if (len + n >= mnt_len)
				break;
		}
		snprintf(mnt, mnt_len, "%.*s", (int)len, path);
		return true;
	}
	return false;
}

__u64 cgroup_id(const char *path)
{
	struct stat st;
	if (stat(path, &st))
		die("cgroup %s: %s", path, strerror(errno));
	return st.st_ino; /* cgroup v2 id is the kernfs inode number */
}

void read_diskstat(const struct dev_arg *d, struct diskstat *s)
{
	FILE *f = fopen("/proc/diskstats", "r");
	memset(s, 0, sizeof(*s));
	if (!f)
		return;
	char line[512], name[64];
	unsigned ma, mi;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long *v = s->v;
		int n = sscanf(line, "%u %u %63s %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu",
			       &ma, &mi, name, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9],
			       &v[10], &v[11], &v[12], &v[13], &v[14], &v[15], &v[16]);
		if (n >= 14 && ma == d->major && mi == d->minor) {
			s->found = true;
			break;
		}
	}
	fclose(f);
}

unsigned long long dev_inflight(const struct dev_arg *d)
{
	char path[128];
	unsigned long long r = 0, w = 0;
	snprintf(path, sizeof(path), "/sys/dev/block/%u:%u/inflight", d->major, d->minor);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	if (fscanf(f, "%llu %llu", &r, &w) != 2)
		r = w = 0;
	fclose(f);
	return r + w;
}

void add_pid_tree(int map_fd, int pid)
{
	/* all threads of pid now; children forked later are added by the kernel side */
	char path[64];
	__u8 one = 1;
	__u32 key = pid;
	/* a pid missing from the map is a process not traced at all: an error, not a smaller result */
	if (bpf_map_update_elem(map_fd, &key, &one, BPF_ANY))
		die("--pid %d: adding it to the traced pids: %s", pid, strerror(errno));
	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	DIR *d = opendir(path);
	if (!d)
		die("--pid %d: no such process", pid);
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		key = atoi(e->d_name); /* /proc's own names: always a number */
		if (bpf_map_update_elem(map_fd, &key, &one, BPF_ANY))
			die("--pid %d: adding its thread %u to the traced pids: %s", pid, key, strerror(errno));
	}
	closedir(d);
}

/* a /proc/PID file into buf (NUL-terminated); its length, or -1 */
static ssize_t read_proc(pid_t pid, const char *name, char *buf, size_t len)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/%s", pid, name);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -1;
	buf[n] = 0;
	return n;
}

/* the state letter and starttime (clock ticks after boot) from a stat file of /proc/PID (a process's "stat" or
 * a thread's "task/TID/stat"); false when it is gone */
static bool proc_stat(pid_t pid, const char *name, char *state, unsigned long long *start)
{
	char buf[1024];
	if (read_proc(pid, name, buf, sizeof(buf)) < 0)
		return false;
	char *p = strrchr(buf, ')'); /* comm may contain spaces and parentheses */
	/* after comm: the state, 18 more fields, then starttime (proc(5) field 22) */
	return p && sscanf(p + 2, "%c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
			   state, start) == 2;
}

/* running or sleeping; a zombie waiting for its parent counts as gone */
bool pid_alive(int pid)
{
	char state;
	unsigned long long start;
	return proc_stat(pid, "stat", &state, &start) && state != 'Z' && state != 'X';
}

bool process_alive(int pid)
{
	char dir[32];
	snprintf(dir, sizeof(dir), "/proc/%d/task", pid);
	DIR *d = opendir(dir);
	if (!d)
		return false;
	bool alive = false;
	for (struct dirent *e; !alive && (e = readdir(d));) {
		char name[sizeof(e->d_name) + 16], state;
		unsigned long long start;
		if (e->d_name[0] == '.')
			continue;
		snprintf(name, sizeof(name), "task/%s/stat", e->d_name);
		alive = proc_stat(pid, name, &state, &start) && state != 'Z' && state != 'X';
	}
	closedir(d);
	return alive;
}

struct io_calls_of {
	pid_t tid;
	bool gone;		  /* not seen alive at the last look, its exit's counts not yet taken: looked for once more */
	bool ended;		  /* its exit's counts were taken at this look */
	bool untraced;		  /* new and not (yet) passing the filters: its counts are a starting point only */
	unsigned long long start; /* when it started (CLOCK_BOOTTIME ns): a reused id starts later */
	__u64 reads, writes;
};

static struct {
	struct io_calls_of *v;
	size_t n;
	unsigned long long at; /* when the table was taken, CLOCK_BOOTTIME ns */
	bool taken;
} io_seen;

/* a is a thread id (bsearch's key) or an entry, whose first member is its thread id (qsort) */
static int cmp_io_tid(const void *a, const void *b)
{
	pid_t x = *(const pid_t *)a, y = ((const struct io_calls_of *)b)->tid;
	return x < y ? -1 : x > y;
}

static struct io_calls_of *io_push(struct io_calls_of **v, size_t *n, size_t *cap)
{
	if (*n == *cap) {
		*cap = *cap ? 2 * *cap : 256;
		struct io_calls_of *m = realloc(*v, *cap * sizeof(*m));
		if (!m)
			die("out of memory for the threads' read counts");
		*v = m;
	}
	return &(*v)[(*n)++];
}

static struct io_calls_of *io_find(pid_t tid, struct io_calls_of *v, size_t n)
{
	return n ? bsearch(&tid, v, n, sizeof(*v), cmp_io_tid) : NULL;
}

static struct io_calls_of *io_was(pid_t tid) { return io_seen.taken ? io_find(tid, io_seen.v, io_seen.n) : NULL; }

/* a thread started since the last look: all it read is since then (none is before the first look) */
static bool io_new(unsigned long long start) { return io_seen.taken && start >= io_seen.at; }

/* the same thread as seen at a look (a thread id reused starts later) */
static struct io_calls_of *io_same(struct io_calls_of *seen, unsigned long long start)
{
	return seen && seen->start == start ? seen : NULL;
}

/* one live thread's counts from the iterator: into next, and what it read since the last look into delta */
static void io_take(const struct fst_task_calls *c, struct io_calls_of **next, size_t *n, size_t *cap,
		    struct io_calls *delta)
{
	struct io_calls_of *x = io_push(next, n, cap), *was = io_same(io_was((pid_t)c->tid), c->start_ns);
	x->tid = c->tid;
	x->gone = x->ended = false;
	x->untraced = !c->traced;
	x->start = c->start_ns;
	x->reads = c->calls.reads;
	x->writes = c->calls.writes;
	if (x->untraced)
		return;
	if (was && x->reads >= was->reads && x->writes >= was->writes) {
		delta->reads += x->reads - was->reads;
		delta->writes += x->writes - was->writes;
	} else if (io_new(x->start)) {
		delta->reads += x->reads;
		delta->writes += x->writes;
	}
}

/* the live threads' counts from one run of the task iterator (it), whole records however the reads split them,
 * each taken into *next (n, cap) and delta; errno where the read failed */
static int io_read_alive(int it, struct io_calls_of **next, size_t *n, size_t *cap, struct io_calls *delta)
{
	size_t have = 0;
	char buf[256 * sizeof(struct fst_task_calls)];
	ssize_t got;
	while ((got = read(it, buf + have, sizeof(buf) - have)) > 0 || (got < 0 && errno == EINTR)) {
		if (got < 0)
			continue;
		have += got;
		size_t whole = have / sizeof(struct fst_task_calls) * sizeof(struct fst_task_calls);
		for (size_t off = 0; off < whole; off += sizeof(struct fst_task_calls)) {
			struct fst_task_calls c;
			memcpy(&c, buf + off, sizeof(c));
			io_take(&c, next, n, cap, delta);
		}
		memmove(buf, buf + whole, have - whole);
		have -= whole;
	}
	return got < 0 ? errno : 0;
}

/*
 * The threads that exited (exited_fd's entries, taken out): their calls since this look or the last one saw them;
 * all of them when neither did and they started since the last look; none when they are older (they joined the
 * filters since the last look, and what they read before is not the traced threads').  next: this look's alive
 * threads, sorted.
 */
static void io_take_exited(int exited_fd, struct io_calls_of *next, size_t alive, struct io_calls *delta)
{
	struct fst_thread_key key, prev, *pk = NULL;
	struct fst_task_calls c;
	while (exited_fd >= 0 && !bpf_map_get_next_key(exited_fd, pk, &key)) {
		pk = &prev;
		prev = key;
		if (bpf_map_lookup_elem(exited_fd, &key, &c))
			continue;
		/* the exit fires before the thread is a zombie: this look may have counted it alive already, up to
		 * what it read then; else the last look did */
		struct io_calls_of *now_seen = io_same(io_find((pid_t)c.tid, next, alive), c.start_ns);
		struct io_calls_of *was = io_same(io_was((pid_t)c.tid), c.start_ns);
		struct io_calls_of *base = now_seen ? now_seen : was;
		if (base || io_new(c.start_ns)) {
			__u64 r0 = base ? base->reads : 0, w0 = base ? base->writes : 0;
			delta->reads += c.calls.reads >= r0 ? c.calls.reads - r0 : 0;
			delta->writes += c.calls.writes >= w0 ? c.calls.writes - w0 : 0;
		}
		if (now_seen)
			now_seen->ended = true; /* gone by the next look, with nothing left to take */
		if (was)
			was->ended = true; /* not carried over */
		bpf_map_delete_elem(exited_fd, &key);
	}
}

bool io_calls_step(int iter_link_fd, int exited_fd, __u64 *new_since_ns, struct io_calls *delta)
{
	/* before the first look every thread is an old one: none needs a starting point */
	*new_since_ns = io_seen.taken ? io_seen.at : ~0ull;
	unsigned long long now = now_ns(CLOCK_BOOTTIME);
	int it = bpf_iter_create(iter_link_fd);
	if (it < 0)
		return false;
	struct io_calls_of *next = NULL;
	size_t n = 0, cap = 0;
	int err = io_read_alive(it, &next, &n, &cap, delta);
	close(it);
	if (err) {
		free(next);
		errno = err;
		return false;
	}
	if (n)
		qsort(next, n, sizeof(*next), cmp_io_tid);
	size_t alive = n;
	io_take_exited(exited_fd, next, alive, delta);
	/* threads of the last look neither alive now nor exited yet (their exit raced this look): once more */
	for (size_t i = 0; i < io_seen.n; i++) {
		struct io_calls_of *o = &io_seen.v[i];
		if (o->ended || o->gone || io_find(o->tid, next, alive))
			continue;
		struct io_calls_of *x = io_push(&next, &n, &cap);
		*x = *o;
		x->gone = true;
	}
	if (n)
		qsort(next, n, sizeof(*next), cmp_io_tid);
	free(io_seen.v);
	io_seen.v = next;
	io_seen.n = n;
	io_seen.at = now;
	io_seen.taken = true;
	return true;
}

/* a number in a /proc file (a sysctl), -1 when it cannot be read */
long long proc_number(const char *path)
{
	long long v = -1;
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	if (fscanf(f, "%lld", &v) != 1)
		v = -1;
	fclose(f);
	return v;
}

/* task delay accounting (the ground truth for I/O wait): on while tracing, then as it was */
int delayacct_set(int on)
{
	int was = -1;
	FILE *f = fopen("/proc/sys/kernel/task_delayacct", "r+");
	if (!f)
		return -1;
	if (fscanf(f, "%d", &was) != 1)
		was = -1;
	if (on >= 0 && was != on) {
		rewind(f);
		fprintf(f, "%d\n", on);
	}
	fclose(f);
	return was;
}

/* kernel.task_delayacct is system-wide, so concurrent collectors share it through a holder list in
 * DELAYACCT_REFS, under flock: "<value to restore>\n<pid>...".  The first holder in records the value,
 * the last one out restores it.  A holder that died without releasing (SIGKILL) is dropped by the next
 * collector or by fstrace's leftover sweep (cli/leftovers.py), which then restores the value itself. */
#define DELAYACCT_REFS "/run/fstrace/delayacct"
bool delayacct_held;

static bool is_collector(pid_t pid)
{
	char path[64], comm[32] = "";
	snprintf(path, sizeof(path), "/proc/%d/comm", pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	bool ok = fgets(comm, sizeof(comm), f) && !strcmp(comm, "fstrace-collect\n");
	fclose(f);
	return ok && pid_alive(pid); /* a zombie holds nothing */
}

int delayacct_ref(bool acquire)
{
	mkdir("/run/fstrace", 0755);
	int fd = open(DELAYACCT_REFS, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0 || flock(fd, LOCK_EX)) { /* no /run: unshared, as before */
		if (fd >= 0)
			close(fd);
		return delayacct_set(acquire ? 1 : -1);
	}
	FILE *f = fdopen(dup(fd), "r");
	int restore = -1, n = 0, p;
	pid_t holders[256];
	if (f) {
		if (fscanf(f, "%d", &restore) != 1)
			restore = -1;
		while (n < 255 && fscanf(f, "%d", &p) == 1)
			if (p != getpid() && is_collector(p))
				holders[n++] = p;
		fclose(f);
	}
	int was = delayacct_set(-1);
	if (acquire) {
		if (restore < 0)
			restore = was;
		holders[n++] = getpid();
		delayacct_set(1);
	} else if (n == 0 && restore >= 0) {
		delayacct_set(restore);
	}
	if (ftruncate(fd, 0) == 0 && lseek(fd, 0, SEEK_SET) == 0 && n > 0) { /* the read moved the shared offset */
		dprintf(fd, "%d\n", restore);
		for (int i = 0; i < n; i++)
			dprintf(fd, "%d\n", holders[i]);
	}
	close(fd); /* releases the flock */
	return was;
}

void delayacct_release(void)
{
	if (delayacct_held)
		delayacct_ref(false);
}

/*
 * Expire in-flight entries older than FST_STALE_NS from buckets with no free slot: the last resort of a full
 * table, whose entries' end events never came.  The BPF side does it (block.bpf.c expire_stale, run here): its
 * in-flight tables are freed with a compare-and-swap, which only a BPF program can do, and it takes the bios
 * back from the task's in-flight count itself.
 */
void expire_stale(struct block_bpf *blk, struct expired *ex)
{
	LIBBPF_OPTS(bpf_test_run_opts, run);
	if (bpf_prog_test_run_opts(bpf_program__fd(blk->progs.expire_stale), &run)) {
		ex->run_failures++;
		return;
	}
	ex->bios = blk->bss->expired_bios;
	ex->requests = blk->bss->expired_requests;
	ex->work_items = blk->bss->expired_work;
}
