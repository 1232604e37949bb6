"""scripts/vmlinux_h.py: another architecture's vmlinux.h from a kernel image's BTF and its modules' split BTF,
on bpftool C dumps made up for the test (the real one is made by `make vmlinux ARCH=arm64 KERNEL_PKG=...`)."""
import pytest

from scripts import vmlinux_h

HEAD = "#ifndef __VMLINUX_H__\n#define __VMLINUX_H__"
POP = "#ifndef BPF_NO_PRESERVE_ACCESS_INDEX\n#pragma clang attribute pop\n#endif"
END = "#endif /* __VMLINUX_H__ */"
KERNEL = [HEAD, "struct gendisk {\n\tint major;\n};", "enum {\n\tOpt_source = 0,\n};", POP, END]


def dump(*defs):
    """A module's bpftool C dump over the kernel's BTF: the kernel's definitions with the module's among them."""
    return "\n\n".join([HEAD, KERNEL[1]] + list(defs) + KERNEL[2:]) + "\n"


@pytest.mark.unit
def test_modules_types_go_before_the_headers_end_once_each():
    loop = "struct loop_device {\n\tstruct gendisk *lo_disk;\n};"
    header, skipped = vmlinux_h.merge(KERNEL, [("loop", dump(loop)), ("erofs", dump(loop, "struct erofs_sb_info "
                                                                                      "{\n\tint x;\n};"))])
    assert header == KERNEL[:3] + [loop, "struct erofs_sb_info {\n\tint x;\n};", POP, END]
    assert skipped == []


@pytest.mark.unit
def test_a_name_defined_before_is_left_out_and_said():
    """Two modules' different struct workspace, or an anonymous enum whose enumerator the kernel or another
    module has, would not compile together: the later one is left out, and named."""
    a = "struct workspace {\n\tvoid *mem;\n};"
    b = "struct workspace {\n\tlong level;\n};"
    opts = "enum {\n\tOpt_source = 0,\n\tOpt_acl = 1,\n};"
    header, skipped = vmlinux_h.merge(KERNEL, [("squashfs", dump(a)), ("btrfs", dump(b, opts))])
    assert a in header and b not in header and opts not in header
    assert skipped == ["btrfs: struct workspace", "btrfs: enumerator Opt_source"]


@pytest.mark.unit
@pytest.mark.parametrize("block,declared", [
    ("struct a {\n\tint x;\n};", {"struct a"}),
    ("union u {\n\tint x;\n};", {"union u"}),
    ("typedef int pid_t;", {"typedef pid_t"}),
    ("typedef void (*fn_t)(int);", {"typedef fn_t"}),
    ("typedef struct {\n\tint x;\n} s_t;", {"typedef s_t"}),
    ("typedef char name_t[16];", {"typedef name_t"}),
    ("enum e {\n\tE_A = 0,\n\tE_B = 1,\n};", {"enum e", "enumerator E_A", "enumerator E_B"}),
    ("struct b;", set()),  # a forward declaration defines nothing: repeating it is C
])
def test_names_a_definition_declares(block, declared):
    assert vmlinux_h.names(block) == declared
