// SPDX-License-Identifier: GPL-2.0
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/bpf.h>
#include <bpf/bpf.h>
#include "names.h"
#include "tiers.h"

static struct btf *vmlinux_btf(void)
{
	static struct btf *btf;
	static bool tried;
	if (!tried) {
		tried = true;
		btf = btf__load_vmlinux_btf();
		if (libbpf_get_error(btf))
			btf = NULL;
	}
	return btf;
}

bool tp_btf_exists(const char *tp)
{
	char name[256];
	struct btf *btf = vmlinux_btf();
	snprintf(name, sizeof(name), "btf_trace_%s", tp);
	return btf && btf__find_by_name_kind(btf, name, BTF_KIND_TYPEDEF) > 0;
}

/* the prototype of tracepoint tp's BTF (btf_trace_<tp>: typedef -> pointer -> (void *__data, its arguments...)) */
static const struct btf_type *tp_proto(struct btf *btf, const char *tp)
{
	char tname[256];
	snprintf(tname, sizeof(tname), "btf_trace_%s", tp);
	int id = btf ? btf__find_by_name_kind(btf, tname, BTF_KIND_TYPEDEF) : -1;
	if (id <= 0)
		return NULL;
	const struct btf_type *t = btf__type_by_id(btf, btf__resolve_type(btf, id));
	t = t && btf_is_ptr(t) ? btf__type_by_id(btf, t->type) : NULL;
	return t && btf_is_func_proto(t) ? t : NULL;
}

int tp_nr_args(const char *tp)
{
	const struct btf_type *t = tp_proto(vmlinux_btf(), tp);
	return t ? btf_vlen(t) - 1 : -1;
}

bool tp_arg0_is_struct(const char *tp, const char *name)
{
	struct btf *btf = vmlinux_btf();
	const struct btf_type *t = tp_proto(btf, tp);
	if (!t || btf_vlen(t) < 2)
		return false;
	const struct btf_type *arg = btf__type_by_id(btf, btf__resolve_type(btf, btf_params(t)[1].type));
	arg = arg && btf_is_ptr(arg) ? btf__type_by_id(btf, btf__resolve_type(btf, arg->type)) : NULL;
	return arg && btf_is_struct(arg) && !strcmp(btf__name_by_offset(btf, arg->name_off), name);
}

/* module BTFs, loaded once (Debian 6.1 builds erofs/squashfs/btrfs as modules) */
#define MAX_MOD_BTF 256
static struct {
	__u32 id;
	struct btf *btf;
} mod_btfs[MAX_MOD_BTF];
static int nr_mod_btfs = -1;

static void load_module_btfs(struct btf *vml)
{
	__u32 btf_id = 0;
	nr_mod_btfs = 0;
	while (!bpf_btf_get_next_id(btf_id, &btf_id) && nr_mod_btfs < MAX_MOD_BTF) {
		struct btf *mod = btf__load_from_kernel_by_id_split(btf_id, vml);
		if (libbpf_get_error(mod))
			continue;
		mod_btfs[nr_mod_btfs].id = btf_id;
		mod_btfs[nr_mod_btfs++].btf = mod;
	}
}

/* Type id of name (of kind) in vmlinux BTF, else in a module's (*mod = its index, -1 for vmlinux); <= 0: none. */
static int find_btf(const char *name, __u32 kind, int *mod)
{
	struct btf *vml = vmlinux_btf();
	*mod = -1;
	if (!vml)
		return -ENOENT;
	int id = btf__find_by_name_kind(vml, name, kind);
	if (id > 0)
		return id;
	if (nr_mod_btfs < 0)
		load_module_btfs(vml);
	for (int i = 0; i < nr_mod_btfs; i++) {
		id = btf__find_by_name_kind(mod_btfs[i].btf, name, kind);
		if (id > 0) {
			*mod = i;
			return id;
		}
	}
	return -ENOENT;
}

/* Find func in vmlinux BTF, else in module BTF; returns the type id and (for modules) an fd to close. */
static int find_func_btf(const char *func, int *obj_fd)
{
	int mod, id = find_btf(func, BTF_KIND_FUNC, &mod);
	*obj_fd = -1;
	if (id <= 0 || mod < 0)
		return id;
	*obj_fd = bpf_btf_get_fd_by_id(mod_btfs[mod].id);
	return *obj_fd < 0 ? -errno : id;
}

int func_param_index(const char *func, const char *param)
{
	int mod, id = find_btf(func, BTF_KIND_FUNC, &mod);
	if (id <= 0)
		return -1;
	struct btf *btf = mod < 0 ? vmlinux_btf() : mod_btfs[mod].btf;
	const struct btf_type *proto = btf__type_by_id(btf, btf__type_by_id(btf, id)->type);
	if (!proto || !btf_is_func_proto(proto))
		return -1;
	const struct btf_param *params = btf_params(proto);
	for (int i = 0; i < btf_vlen(proto); i++)
		if (!strcmp(btf__name_by_offset(btf, params[i].name_off), param))
			return i;
	return -1;
}

/* Do the kernel's modules have BTF of their own ("bpf: Load and verify kernel module BTFs", 5.11)?  Without it a
 * module's functions, tracepoints and types are unknown to BTF, and a program reading its types cannot load. */
static bool modules_have_btf(void)
{
	if (nr_mod_btfs < 0 && vmlinux_btf())
		load_module_btfs(vmlinux_btf());
	return nr_mod_btfs > 0;
}

/* "... has no BTF" and why, into why */
static void no_btf_why(const char *tier, const char *what, char *why, size_t why_len)
{
	if (modules_have_btf())
		snprintf(why, why_len, "%s: %s has no BTF (inlined, renamed or not built)", tier, what);
	else
		snprintf(why, why_len, "%s: %s has no BTF (not in vmlinux's, and this kernel's modules have none)", tier,
			 what);
}

/* Is there a tracepoint of this name, in vmlinux or a loaded module?  Unknown (true) without BTF. */
static bool tracepoint_exists(const char *tp)
{
	char name[256];
	int mod;
	snprintf(name, sizeof(name), "btf_trace_%s", tp);
	return !vmlinux_btf() || find_btf(name, BTF_KIND_TYPEDEF, &mod) > 0;
}

/* EPERM/EACCES on a test load is the kernel's policy for all fentry programs: ask once */
static int fentry_policy_err;

/* the usual cause of ENOTSUPP at a test attach, by architecture (docs/measuring.md): x86-64's trampolines before
 * 6.6 take at most 6 arguments; arm64's attach to a kernel function only through ftrace direct calls, which
 * Debian's arm64 6.1 is built without (no CONFIG_DYNAMIC_FTRACE_WITH_DIRECT_CALLS) */
#if defined(__x86_64__)
#define FENTRY_ENOTSUPP_HINT "; trampolines before 6.6 take at most 6 arguments"
#elif defined(__aarch64__)
#define FENTRY_ENOTSUPP_HINT "; arm64 trampolines need ftrace direct calls"
#else
#define FENTRY_ENOTSUPP_HINT ""
#endif

/* Does the running kernel let us use fentry on func (BTF of vmlinux or a module, and a test load)?  func_args: the
 * programs read their arguments with bpf_get_func_arg/ret, which the test program then calls too. */
static bool fentry_can_attach(const char *func, bool func_args, char *why, size_t why_len)
{
	int obj_fd;
	int id = find_func_btf(func, &obj_fd);
	if (id < 0) {
		no_btf_why("fentry", func, why, why_len);
		return false;
	}
	if (fentry_policy_err) {
		snprintf(why, why_len, "fentry: not permitted on this kernel: %s", strerror(fentry_policy_err));
		if (obj_fd >= 0)
			close(obj_fd);
		return false;
	}
	/* [bpf_get_func_arg(ctx, 0, fp - 8);] r0 = 0; exit */
	struct bpf_insn insns[] = {
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_2, .imm = 0 },
		{ .code = BPF_ALU64 | BPF_MOV | BPF_X, .dst_reg = BPF_REG_3, .src_reg = BPF_REG_10 },
		{ .code = BPF_ALU64 | BPF_ADD | BPF_K, .dst_reg = BPF_REG_3, .imm = -8 },
		{ .code = BPF_JMP | BPF_CALL, .imm = BPF_FUNC_get_func_arg },
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 0 },
		{ .code = BPF_JMP | BPF_EXIT },
	};
	int skip = func_args ? 0 : 4;
	LIBBPF_OPTS(bpf_prog_load_opts, opts, .expected_attach_type = BPF_TRACE_FENTRY, .attach_btf_id = id);
	if (obj_fd >= 0)
		opts.attach_btf_obj_fd = obj_fd;
	int prog_fd = bpf_prog_load(BPF_PROG_TYPE_TRACING, "fst_probe", "GPL", insns + skip, 6 - skip, &opts);
	int err = prog_fd < 0 ? -errno : 0;
	int link_fd = -1;
	if (!err) {
		link_fd = bpf_raw_tracepoint_open(NULL, prog_fd);
		if (link_fd < 0)
			err = -errno;
	}
	if (err == -524) /* ENOTSUPP, kernel-internal: strerror has no name for it */
		snprintf(why, why_len, "fentry: test %s of %s failed: not supported for this function by the "
				       "kernel (ENOTSUPP" FENTRY_ENOTSUPP_HINT ")",
			 prog_fd < 0 ? "load" : "attach", func);
	else if (err && func_args && prog_fd < 0)
		snprintf(why, why_len, "fentry: test load of %s calling bpf_get_func_arg, as its program does, failed: %s",
			 func, strerror(-err));
	else if (err)
		snprintf(why, why_len, "fentry: test %s of %s failed: %s", prog_fd < 0 ? "load" : "attach",
			 func, strerror(-err));
	if ((err == -EPERM || err == -EACCES) && !func_args)
		fentry_policy_err = -err;
	if (link_fd >= 0)
		close(link_fd);
	if (prog_fd >= 0)
		close(prog_fd);
	if (obj_fd >= 0)
		close(obj_fd);
	return !err;
}

bool kernel_has_func(const char *func)
{
	int mod;
	return find_btf(func, BTF_KIND_FUNC, &mod) > 0;
}

/* Can a kprobe be placed on func (kprobe PMU, function listed as traceable)? */
static bool kprobe_can_attach(const char *func, char *why, size_t why_len)
{
	if (access("/sys/bus/event_source/devices/kprobe/type", R_OK)) {
		snprintf(why, why_len, "kprobe: kernel has no kprobe PMU (CONFIG_KPROBES off)");
		return false;
	}
	/* the kprobe programs read their function's arguments through CO-RE: a module's types need its BTF */
	if (vmlinux_btf() && !modules_have_btf() && !kernel_has_func(func)) {
		no_btf_why("kprobe", func, why, why_len);
		return false;
	}
	const char *lists[] = { "/sys/kernel/tracing/available_filter_functions",
				"/sys/kernel/debug/tracing/available_filter_functions" };
	for (unsigned i = 0; i < 2; i++) {
		FILE *f = fopen(lists[i], "r");
		if (!f)
			continue;
		char line[512];
		size_t n = strlen(func);
		bool found = false;
		while (fgets(line, sizeof(line), f)) {
			if (!strncmp(line, func, n) && (line[n] == '\n' || line[n] == ' ')) {
				found = true;
				break;
			}
		}
		fclose(f);
		if (!found)
			snprintf(why, why_len, "kprobe: %s is not traceable (inlined or notrace)", func);
		return found;
	}
	/* no tracefs list to check: try it, attach will tell */
	return true;
}

/* Does prog (before load) call bpf_get_func_arg, bpf_get_func_ret or bpf_get_func_arg_cnt? */
static bool calls_func_arg_helpers(const struct bpf_program *prog)
{
	const struct bpf_insn *insn = prog ? bpf_program__insns(prog) : NULL;
	for (size_t i = 0; insn && i < bpf_program__insn_cnt(prog); i++)
		if (insn[i].code == (BPF_JMP | BPF_CALL) && insn[i].src_reg == 0 &&
		    (insn[i].imm == BPF_FUNC_get_func_arg || insn[i].imm == BPF_FUNC_get_func_ret ||
		     insn[i].imm == BPF_FUNC_get_func_arg_cnt))
			return true;
	return false;
}

static bool tier_offered(enum fst_tier t, const char *name, bool func_args, bool no_btf_tp, bool no_fentry, char *why,
			 size_t why_len)
{
	switch (t) {
	case FST_TIER_FENTRY:
		if (no_fentry) {
			snprintf(why, why_len, "fentry: disabled for this load");
			return false;
		}
		return fentry_can_attach(name, func_args, why, why_len);
	case FST_TIER_KPROBE:
		return kprobe_can_attach(name, why, why_len);
	case FST_TIER_TP_BTF:
		if (no_btf_tp) {
			snprintf(why, why_len, "tp_btf: disabled for this load");
			return false;
		}
		if (!tp_btf_exists(name)) {
			snprintf(why, why_len, "tp_btf: no btf_trace_%s in vmlinux BTF", name);
			return false;
		}
		return true;
	case FST_TIER_RAW_TP:
		if (!tracepoint_exists(name)) {
			if (modules_have_btf())
				snprintf(why, why_len, "no tracepoint %s in this kernel", name);
			else
				snprintf(why, why_len, "no tracepoint %s in this kernel's BTF (its modules have none)", name);
			return false;
		}
		return true;
	default:
		return false;
	}
}

/* the program at offset `at` of a skeleton struct (struct probe's prog_at), NULL for 0 */
static struct bpf_program *skel_prog(const void *skel, size_t at)
{
	return at ? *(struct bpf_program *const *)((const char *)skel + at) : NULL;
}

void tiers_unload(const void *skel, struct probe *p, const char *why)
{
	for (enum fst_tier t = FST_TIER_NONE + 1; t < FST_NR_TIERS; t++) {
		struct bpf_program *progs[2] = { skel_prog(skel, p->prog_at[t]), skel_prog(skel, p->exit_prog_at[t]) };
		for (int k = 0; k < 2; k++)
			if (progs[k])
				bpf_program__set_autoload(progs[k], false);
	}
	p->tier = FST_TIER_NONE;
	p->prog = p->exit_prog = NULL;
	if (why)
		snprintf(p->why, sizeof(p->why), "%s", why);
}

void tiers_select(const void *skel, struct probe *probes, int n, bool no_btf_tp, bool no_fentry)
{
	for (int i = 0; i < n; i++) {
		struct probe *p = &probes[i];
		p->tier = FST_TIER_NONE;
		p->prog = p->exit_prog = NULL;
		p->why[0] = 0;
		for (enum fst_tier t = FST_TIER_NONE + 1; t < FST_NR_TIERS; t++) {
			struct bpf_program *prog = skel_prog(skel, p->prog_at[t]);
			struct bpf_program *exit_prog = skel_prog(skel, p->exit_prog_at[t]);
			if (!prog)
				continue;
			bpf_program__set_autoload(prog, false);
			if (exit_prog)
				bpf_program__set_autoload(exit_prog, false);
			if (p->tier != FST_TIER_NONE)
				continue;
			char why[160] = "";
			bool func_args = calls_func_arg_helpers(prog) || calls_func_arg_helpers(exit_prog);
			if (tier_offered(t, p->hook ? p->hook : p->name, func_args, no_btf_tp, no_fentry, why, sizeof(why))) {
				p->tier = t;
				p->prog = prog;
				p->exit_prog = exit_prog;
				bpf_program__set_autoload(prog, true);
				if (exit_prog)
					bpf_program__set_autoload(exit_prog, true);
			} else if (why[0]) {
				size_t l = strlen(p->why);
				snprintf(p->why + l, sizeof(p->why) - l, "%s%s", l ? "; " : "", why);
			}
		}
	}
}

int tiers_attach(struct probe *probes, int n)
{
	for (int i = 0; i < n; i++) {
		struct probe *p = &probes[i];
		if (!p->prog)
			continue;
		/* the exit program first, and detached last (tiers_detach): every call whose entry a program saw
		 * has its exit seen too (the request boundaries count on it) */
		if (p->exit_prog) {
			p->exit_link = bpf_program__attach(p->exit_prog);
			if (!p->exit_link) {
				int err = errno;
				size_t l = strlen(p->why);
				snprintf(p->why + l, sizeof(p->why) - l, "%s%s: attach of its exit failed: %s", l ? "; " : "",
					 tier_name(p->tier), strerror(err));
				p->tier = FST_TIER_NONE;
				p->prog = p->exit_prog = NULL;
				if (p->required) {
					fprintf(stderr, "fstrace-collect: cannot attach %s: %s\n", p->name, strerror(err));
					return -err;
				}
				continue;
			}
		}
		p->link = bpf_program__attach(p->prog);
		if (!p->link && p->exit_link) {
			int err = errno;
			bpf_link__destroy(p->exit_link);
			p->exit_link = NULL;
			errno = err;
		}
		if (!p->link) {
			int err = -errno;
			size_t l = strlen(p->why);
			snprintf(p->why + l, sizeof(p->why) - l, "%s%s: attach failed: %s", l ? "; " : "",
				 tier_name(p->tier), strerror(-err));
			p->tier = FST_TIER_NONE;
			p->prog = p->exit_prog = NULL;
			if (p->required) {
				fprintf(stderr, "fstrace-collect: cannot attach %s: %s\n", p->name, strerror(-err));
				return err;
			}
		}
	}
	return 0;
}

/* empty_fd, an empty program loaded like prog (attach_empty_like), attached at prog's hook: its link fd, or -errno */
static int attach_empty_twin(struct bpf_program *prog, int empty_fd)
{
	/* a raw_tp program names its tracepoint at attach; a tracing program (tp_btf, fentry, fexit) has it */
	const char *sec = bpf_program__section_name(prog), *slash = strchr(sec, '/');
	bool raw = bpf_program__type(prog) == BPF_PROG_TYPE_RAW_TRACEPOINT;
	int link = bpf_raw_tracepoint_open(raw && slash ? slash + 1 : NULL, empty_fd);
	return link < 0 ? -errno : link;
}

/* an empty program of prog's type on prog's attach point, attached: its link fd, or -errno */
static int attach_empty_like(struct bpf_program *prog, int *prog_fd)
{
	struct bpf_insn insns[] = {
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 0 },
		{ .code = BPF_JMP | BPF_EXIT },
	};
	struct bpf_prog_info info = {};
	__u32 len = sizeof(info);
	enum bpf_prog_type type = bpf_program__type(prog);
	if (bpf_obj_get_info_by_fd(bpf_program__fd(prog), &info, &len))
		return -errno;
	LIBBPF_OPTS(bpf_prog_load_opts, o, .expected_attach_type = bpf_program__expected_attach_type(prog),
		    .attach_btf_id = info.attach_btf_id);
	if (type != BPF_PROG_TYPE_TRACING && type != BPF_PROG_TYPE_RAW_TRACEPOINT)
		return -EOPNOTSUPP;
	/* a module's function (erofs, squashfs, btrfs built as modules) is named in that module's BTF */
	int btf_fd = info.attach_btf_obj_id ? bpf_btf_get_fd_by_id(info.attach_btf_obj_id) : -1;
	if (btf_fd >= 0)
		o.attach_btf_obj_fd = btf_fd;
	int fd = bpf_prog_load(type, "fst_empty", "GPL", insns, 2, &o);
	int err = -errno;
	if (btf_fd >= 0)
		close(btf_fd);
	if (fd < 0)
		return err;
	*prog_fd = fd;
	return attach_empty_twin(prog, fd);
}

int tiers_attach_empty(struct probe *probes, int n)
{
	for (int i = 0; i < n; i++) {
		struct probe *p = &probes[i];
		struct bpf_program *progs[2] = { p->prog, p->exit_prog };
		for (int k = 0; k < 2 && p->tier != FST_TIER_NONE; k++) {
			if (!progs[k])
				continue;
			int link = attach_empty_like(progs[k], &p->empty_fd[k]);
			if (link < 0 && k == 1) { /* no exit twin: the entry twin goes too */
				close(p->empty_link_fd[0]);
				close(p->empty_fd[0]);
				p->empty_link_fd[0] = p->empty_fd[0] = 0;
			}
			if (link < 0) {
				snprintf(p->why, sizeof(p->why), "--empty-programs: no empty twin on %s: %s",
					 tier_name(p->tier), strerror(-link));
				p->tier = FST_TIER_NONE;
				if (p->required) {
					fprintf(stderr, "fstrace-collect: %s: %s\n", p->name, p->why);
					return link;
				}
				break;
			}
			p->empty_link_fd[k] = link;
		}
		if (p->tier == FST_TIER_NONE)
			p->prog = p->exit_prog = NULL;
	}
	return 0;
}

bool tier_attached(const struct probe *p) { return p->link || p->empty_link_fd[0] > 0; }

int tier_run_fd(const struct probe *p, int k)
{
	if (p->empty_fd[k] > 0)
		return p->empty_fd[k];
	struct bpf_program *prog = k ? p->exit_prog : p->prog;
	return prog ? bpf_program__fd(prog) : -1;
}

void tier_unhook(struct probe *p)
{
	if (p->empty_link_fd[0] > 0)
		close(p->empty_link_fd[0]);
	p->empty_link_fd[0] = 0;
	bpf_link__destroy(p->link);
	p->link = NULL;
}

int tier_rehook(struct probe *p)
{
	if (p->empty_fd[0] > 0) {
		int link = attach_empty_twin(p->prog, p->empty_fd[0]);
		if (link < 0)
			return link;
		p->empty_link_fd[0] = link;
		return 0;
	}
	p->link = bpf_program__attach(p->prog);
	if (!p->link) {
		int err = -errno;
		return err ? err : -EINVAL;
	}
	return 0;
}

void tiers_detach(struct probe *probes, int n)
{
	for (int i = n - 1; i >= 0; i--) { /* the reverse of the attach order: a table's order can matter */
		for (int k = 0; k < 2; k++) {
			if (probes[i].empty_link_fd[k] > 0)
				close(probes[i].empty_link_fd[k]);
			if (probes[i].empty_fd[k] > 0)
				close(probes[i].empty_fd[k]);
			probes[i].empty_link_fd[k] = probes[i].empty_fd[k] = 0;
		}
		bpf_link__destroy(probes[i].link);
		bpf_link__destroy(probes[i].exit_link);
		probes[i].link = probes[i].exit_link = NULL;
	}
}

/* Does the verifier take BPF atomic compare-and-swap (BPF_ATOMIC | BPF_CMPXCHG: exchange, compare-and-swap and
 * fetch-and-add came together)?  A test load of a socket filter that swaps a stack slot. */
static bool atomics_load(void)
{
	struct bpf_insn insns[] = {
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_1, .imm = 0 },
		{ .code = BPF_STX | BPF_MEM | BPF_DW, .dst_reg = BPF_REG_10, .src_reg = BPF_REG_1, .off = -8 },
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 0 },
		{ .code = BPF_STX | BPF_ATOMIC | BPF_DW, .dst_reg = BPF_REG_10, .src_reg = BPF_REG_1, .off = -8, .imm = BPF_CMPXCHG },
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 0 },
		{ .code = BPF_JMP | BPF_EXIT },
	};
	int fd = bpf_prog_load(BPF_PROG_TYPE_SOCKET_FILTER, "fst_atomics", "GPL", insns, 6, NULL);
	if (fd >= 0)
		close(fd);
	return fd >= 0;
}

bool bpf_build_plain(char *why, size_t len)
{
	why[0] = 0;
	if (getenv("FSTRACE_BPF_PLAIN")) /* tests: the plain build on a kernel that loads the full one */
		snprintf(why, len, "asked for (FSTRACE_BPF_PLAIN)");
	else if (!atomics_load())
		snprintf(why, len, "no BPF atomic compare-and-swap (test load refused)");
	else if (libbpf_probe_bpf_helper(BPF_PROG_TYPE_RAW_TRACEPOINT, BPF_FUNC_loop, NULL) != 1)
		snprintf(why, len, "no bpf_loop helper (test load refused)");
	else if (libbpf_probe_bpf_prog_type(BPF_PROG_TYPE_SYSCALL, NULL) != 1)
		snprintf(why, len, "no syscall programs (test load refused)");
	return why[0] != 0;
}
