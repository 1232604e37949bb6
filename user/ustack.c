// SPDX-License-Identifier: GPL-2.0
/*
 * User-space stacks of traced processes.  The kernel records each frame as
 * (ELF build id, file offset) at sample time (BPF_F_STACK_BUILD_ID), so
 * processes that exited long ago still resolve: the build id is matched to a
 * file among the mappings seen of traced processes, else among the usual
 * binary and library directories, and its symbol table gives the name.  When
 * the kernel could not read the build id (the page was not resident) it
 * records the address instead, resolved through the process's mappings if
 * the collector read them while it ran.
 *
 * Stacks are walked by the kernel through frame pointers: binaries built
 * without them (most distribution packages) give the leaf frame and whatever
 * the frame-pointer register happened to hold.  The folded stack keeps the
 * frames up to the first that resolves to no function and names the
 * executable there once ("[fio]"), never a run of noise (ustack_fold).
 * Stripped files get their symbols from a debug file when one is installed
 * (build id under /usr/lib/debug/.build-id, or .gnu_debuglink).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <linux/bpf.h>

#include "records.h"
#include "ustack.h"

struct mapping {
	unsigned long long start, end, off;
	char *path;
};

struct process {
	__u32 tgid;
	int nr;
	char *exe; /* basename of /proc/PID/exe (else the comm of its request): the frame where a stack's walk
		    * stopped being trustworthy */
	struct mapping *maps;
};

#define PROC_SLOTS 8192 /* open addressing; a run sees far fewer processes */
static struct process procs[PROC_SLOTS];

struct sym {
	unsigned long long addr, size;
	const char *name;
};

struct elf_file {
	char *path;
	bool loaded;
	int build_id_len; /* 0: none read yet or none in the file */
	unsigned char build_id[20];
	int nr_syms;
	struct sym *syms;
	int nr_loads;
	GElf_Phdr loads[16]; /* PT_LOAD headers: file offset -> virtual address */
	struct elf_file *next;
};

static struct elf_file *elf_files;
static struct elf_file *elf_file(const char *path);

static struct process *proc_slot(__u32 tgid, bool create)
{
	for (unsigned i = 0; i < PROC_SLOTS; i++) {
		struct process *p = &procs[(tgid * 2654435761u + i) % PROC_SLOTS];
		if (p->tgid == tgid)
			return p;
		if (!p->tgid)
			return create ? p : NULL;
	}
	return NULL;
}

void ustack_note_process(__u32 tgid, const char *comm)
{
	struct process *p = proc_slot(tgid, true);
	if (!p || p->tgid == tgid)
		return;
	p->tgid = tgid; /* even if unreadable: tried once */
	char path[64], line[4096];
	snprintf(path, sizeof(path), "/proc/%u/exe", tgid);
	ssize_t len = readlink(path, line, sizeof(line) - 1);
	if (len > 0) {
		line[len] = 0;
		char *del = strstr(line, " (deleted)");
		if (del)
			*del = 0;
		char *base = strrchr(line, '/');
		p->exe = strdup(base ? base + 1 : line);
	} else { /* it has exited already (records are read in batches): the name its thread had */
		p->exe = strndup(comm, 16);
	}
	snprintf(path, sizeof(path), "/proc/%u/maps", tgid);
	FILE *f = fopen(path, "r");
	if (!f)
		return;
	int cap = 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long start, end, off;
		char perms[8];
		int n = 0;
		if (sscanf(line, "%llx-%llx %7s %llx %*s %*s %n", &start, &end, perms, &off, &n) < 4 || !n)
			continue;
		char *file = line + n;
		file[strcspn(file, "\n")] = 0;
		if (perms[2] != 'x' || file[0] != '/')
			continue;
		if (p->nr == cap) {
			cap = cap ? cap * 2 : 16;
			p->maps = realloc(p->maps, cap * sizeof(*p->maps));
			if (!p->maps)
				abort();
		}
		p->maps[p->nr++] = (struct mapping){ start, end, off, strdup(file) };
		elf_file(file); /* checked first when build ids are resolved */
	}
	fclose(f);
}

static int cmp_sym(const void *a, const void *b)
{
	const struct sym *x = a, *y = b;
	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

#define NT_GNU_BUILD_ID_TYPE 3

static void read_build_id(struct elf_file *e, Elf_Data *data)
{
	GElf_Nhdr nh;
	size_t off = 0, name_off, desc_off;
	while (data && (off = gelf_getnote(data, off, &nh, &name_off, &desc_off)) > 0) {
		if (nh.n_type == NT_GNU_BUILD_ID_TYPE && nh.n_namesz == 4 &&
		    !memcmp((char *)data->d_buf + name_off, "GNU", 4) && nh.n_descsz <= sizeof(e->build_id)) {
			memcpy(e->build_id, (char *)data->d_buf + desc_off, nh.n_descsz);
			e->build_id_len = nh.n_descsz;
			return;
		}
	}
}

/* the function symbols of one symbol table section, sorted by address */
static void read_syms(struct elf_file *e, Elf *elf, Elf_Scn *scn, GElf_Shdr *sh)
{
	Elf_Data *data = elf_getdata(scn, NULL);
	size_t n = sh->sh_entsize ? sh->sh_size / sh->sh_entsize : 0;
	struct sym *syms = calloc(n ? n : 1, sizeof(*syms));
	int nr = 0;
	for (size_t i = 0; data && syms && i < n; i++) {
		GElf_Sym s;
		if (!gelf_getsym(data, i, &s) || GELF_ST_TYPE(s.st_info) != STT_FUNC || !s.st_value)
			continue;
		const char *name = elf_strptr(elf, sh->sh_link, s.st_name);
		if (name && *name)
			syms[nr++] = (struct sym){ s.st_value, s.st_size, strdup(name) };
	}
	if (!syms)
		return;
	for (int i = 0; i < e->nr_syms; i++)
		free((char *)e->syms[i].name);
	free(e->syms);
	e->syms = syms;
	e->nr_syms = nr;
	qsort(e->syms, e->nr_syms, sizeof(*e->syms), cmp_sym);
}

/* .symtab of a separate debug file (same addresses as the binary's): true if one was read */
static bool debug_file_syms(struct elf_file *e, const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	Elf *elf = elf_begin(fd, ELF_C_READ, NULL);
	Elf_Scn *scn = NULL;
	bool found = false;
	while (elf && !found && (scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;
		if (gelf_getshdr(scn, &sh) && sh.sh_type == SHT_SYMTAB && sh.sh_size) {
			read_syms(e, elf, scn, &sh);
			found = true;
		}
	}
	if (elf)
		elf_end(elf);
	close(fd);
	return found;
}

/*
 * A stripped binary's full symbol table, where the distribution's debug package put it: by build id
 * (/usr/lib/debug/.build-id/xx/yyyy.debug), else by .gnu_debuglink name (next to the binary, in its .debug
 * directory, or under /usr/lib/debug with the binary's directory).
 */
static void debug_syms(struct elf_file *e, const char *debuglink)
{
	char path[4096];
	if (e->build_id_len > 1) {
		int n = snprintf(path, sizeof(path), "/usr/lib/debug/.build-id/%02x/", e->build_id[0]);
		for (int i = 1; i < e->build_id_len; i++)
			n += snprintf(path + n, sizeof(path) - n, "%02x", e->build_id[i]);
		snprintf(path + n, sizeof(path) - n, ".debug");
		if (debug_file_syms(e, path))
			return;
	}
	if (!debuglink || !*debuglink || strchr(debuglink, '/'))
		return;
	const char *slash = strrchr(e->path, '/');
	int dirlen = slash ? (int)(slash - e->path) : 0;
	static const char *const forms[] = { "%.*s/.debug/%s", "/usr/lib/debug%.*s/%s", "%.*s/%s" };
	for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
		snprintf(path, sizeof(path), forms[i], dirlen, e->path, debuglink);
		if (strcmp(path, e->path) && debug_file_syms(e, path))
			return;
	}
}

static void load_elf(struct elf_file *e)
{
	e->loaded = true;
	int fd = open(e->path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	elf_version(EV_CURRENT);
	Elf *elf = elf_begin(fd, ELF_C_READ, NULL);
	if (!elf) {
		close(fd);
		return;
	}
	size_t nph = 0, shstrndx = 0;
	elf_getphdrnum(elf, &nph);
	elf_getshdrstrndx(elf, &shstrndx);
	for (size_t i = 0; i < nph && e->nr_loads < 16; i++) {
		GElf_Phdr ph;
		if (gelf_getphdr(elf, i, &ph) && ph.p_type == PT_LOAD)
			e->loads[e->nr_loads++] = ph;
	}
	/* .symtab when the file has one (not stripped), else a debug file's, else the exported .dynsym */
	Elf_Scn *scn = NULL, *best = NULL;
	GElf_Shdr best_sh = {};
	char debuglink[256] = "";
	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;
		if (!gelf_getshdr(scn, &sh))
			continue;
		if (sh.sh_type == SHT_NOTE && !e->build_id_len)
			read_build_id(e, elf_getdata(scn, NULL));
		const char *name = elf_strptr(elf, shstrndx, sh.sh_name);
		if (name && !strcmp(name, ".gnu_debuglink")) {
			Elf_Data *d = elf_getdata(scn, NULL);
			if (d && d->d_size)
				snprintf(debuglink, sizeof(debuglink), "%.*s", (int)strnlen(d->d_buf, d->d_size),
					 (char *)d->d_buf);
		}
		if (sh.sh_type == SHT_SYMTAB || (sh.sh_type == SHT_DYNSYM && !best)) {
			best = scn;
			best_sh = sh;
		}
	}
	if (best && best_sh.sh_type == SHT_SYMTAB)
		read_syms(e, elf, best, &best_sh);
	else {
		debug_syms(e, debuglink);
		if (!e->nr_syms && best)
			read_syms(e, elf, best, &best_sh);
	}
	elf_end(elf);
	close(fd);
}

static struct elf_file *elf_file(const char *path)
{
	for (struct elf_file *e = elf_files; e; e = e->next)
		if (!strcmp(e->path, path))
			return e;
	struct elf_file *e = calloc(1, sizeof(*e));
	if (!e)
		abort();
	e->path = strdup(path);
	e->next = elf_files;
	elf_files = e;
	return e;
}

static const char *elf_sym(struct elf_file *e, unsigned long long file_off)
{
	if (!e->loaded)
		load_elf(e);
	unsigned long long vaddr = 0;
	bool found = false;
	for (int i = 0; i < e->nr_loads; i++) {
		GElf_Phdr *ph = &e->loads[i];
		if (file_off >= ph->p_offset && file_off < ph->p_offset + ph->p_filesz) {
			vaddr = file_off - ph->p_offset + ph->p_vaddr;
			found = true;
			break;
		}
	}
	if (!found || !e->nr_syms)
		return NULL;
	int lo = 0, hi = e->nr_syms;
	while (lo < hi) {
		int mid = (lo + hi) / 2;
		if (e->syms[mid].addr <= vaddr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (!lo)
		return NULL;
	struct sym *s = &e->syms[lo - 1];
	return (!s->size || vaddr < s->addr + s->size) ? s->name : NULL;
}

static bool same_id(struct elf_file *e, const unsigned char *id)
{
	if (!e->loaded)
		load_elf(e);
	/* the kernel pads build ids shorter than 20 bytes with zeroes */
	return e->build_id_len && !memcmp(e->build_id, id, e->build_id_len);
}

/* directories binaries and libraries are usually in, searched for build ids not among the mappings seen */
static const char *const search_dirs[] = {
	"/usr/bin",
	"/usr/sbin",
	"/bin",
	"/sbin",
	"/usr/lib/x86_64-linux-gnu",
	"/usr/lib/aarch64-linux-gnu",
	"/lib/x86_64-linux-gnu",
	"/lib/aarch64-linux-gnu",
	"/usr/lib",
	"/lib",
	"/usr/libexec",
	"/usr/local/bin",
};
static bool dirs_scanned;

static void scan_dirs(void)
{
	dirs_scanned = true;
	char path[4096];
	for (size_t i = 0; i < sizeof(search_dirs) / sizeof(search_dirs[0]); i++) {
		DIR *d = opendir(search_dirs[i]);
		struct dirent *de;
		while (d && (de = readdir(d))) {
			if (de->d_type != DT_REG && de->d_type != DT_UNKNOWN)
				continue;
			snprintf(path, sizeof(path), "%s/%s", search_dirs[i], de->d_name);
			elf_file(path);
		}
		if (d)
			closedir(d);
	}
}

static struct elf_file *by_build_id(const unsigned char *id)
{
	for (int pass = 0; pass < 2; pass++) {
		for (struct elf_file *e = elf_files; e; e = e->next)
			if (same_id(e, id))
				return e;
		if (dirs_scanned)
			break;
		scan_dirs(); /* once per run, only if some build id is not among the mapped files */
	}
	return NULL;
}

static const char *frame_by_ip(struct process *p, unsigned long long ip)
{
	for (int i = 0; p && i < p->nr; i++) {
		struct mapping *m = &p->maps[i];
		if (ip >= m->start && ip < m->end)
			return elf_sym(elf_file(m->path), ip - m->start + m->off);
	}
	return NULL;
}

/*
 * Folded root first.  The walk is trusted from the leaf outwards while each frame resolves to a function:
 * the first that does not (an address in no mapping, no symbol there, a build id of no file found) is where
 * frame pointers stopped being frame pointers, and every frame past it is noise.  The stack then starts
 * with one frame naming the process's executable, "[fio]": its callers are unknown from there on.
 */
bool ustack_fold(int stacks_fd, __s32 id, __u32 tgid, struct jbuf *out)
{
	struct bpf_stack_build_id frames[FST_USER_STACK_DEPTH] = {};
	if (id < 0 || bpf_map_lookup_elem(stacks_fd, &id, frames))
		return false;
	int depth = 0;
	while (depth < FST_USER_STACK_DEPTH && frames[depth].status != BPF_STACK_BUILD_ID_EMPTY)
		depth++;
	if (!depth)
		return false;
	struct process *p = proc_slot(tgid, false);
	const char *names[FST_USER_STACK_DEPTH];
	int trusted = 0;
	for (; trusted < depth; trusted++) {
		struct elf_file *e;
		const char *name = NULL;
		if (frames[trusted].status == BPF_STACK_BUILD_ID_VALID && (e = by_build_id(frames[trusted].build_id)))
			name = elf_sym(e, frames[trusted].offset);
		else if (frames[trusted].status == BPF_STACK_BUILD_ID_IP)
			name = frame_by_ip(p, frames[trusted].ip);
		if (!name)
			break;
		names[trusted] = name;
	}
	if (trusted < depth)
		jb_add(out, "[%s]%s", p && p->exe ? p->exe : "unknown", trusted ? ";" : "");
	for (int i = trusted - 1; i >= 0; i--)
		jb_add(out, "%s%s", names[i], i ? ";" : "");
	return true;
}
