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

bool sdev_mount(__u32 kdev, char *fstype, size_t fstype_len, char *mnt, size_t mnt_len)
{
	FILE *f = fopen("/proc/self/mountinfo", "r");
	if (!f)
		return false;
	char line[4096], path[1024], type[64];
	unsigned major, minor;
	bool found = false;
	while (!found && fgets(line, sizeof(line), f)) {
		char *dash = strstr(line, " - ");
		if (!dash || sscanf(line, "%*u %*u %u:%u %*s %1023s", &major, &minor, path) != 3 ||
		    sscanf(dash + 3, "%63s", type) != 1 || FST_KDEV(major, minor) != kdev)
			continue;
		unescape_octal(path);
		snprintf(fstype, fstype_len, "%s", type);
		snprintf(mnt, mnt_len, "%s", path);
		found = true;
	}
	fclose(f);
	return found;
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

/* running or sleeping; a zombie waiting for its parent counts as gone */
bool pid_alive(int pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	char *paren = strrchr(buf, ')'); /* comm may contain spaces and parentheses */
	return paren && paren[1] == ' ' && paren[2] != 'Z' && paren[2] != 'X';
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
