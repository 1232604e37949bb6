"""Write vmlinux/<arch>/vmlinux.h for an architecture that is not the host's, from a Debian kernel package
unpacked with dpkg-deb -x (linux-image-*-arm64-unsigned: boot/vmlinuz-*, lib/modules/*/kernel/...).

The kernel's own BTF is the image's .BTF section (what /sys/kernel/btf/vmlinux serves on that kernel), found by
its header (include/uapi/linux/btf.h struct btf_header: magic 0xeB9F, version 1, a 24-byte header, then the type
and string sections it sizes; the largest that bpftool accepts).  Debian builds the filesystems and the loop
driver whose structures bpf/ reads as modules, so their types are in the modules' split BTF, not the image's:
each module's types (bpftool's C of the module over the kernel's BTF, less what the kernel's alone gives) are
added before the header's end.

Usage: python3 -m scripts.vmlinux_h KERNEL_PACKAGE_DIR OUT   (`make vmlinux ARCH=arm64 KERNEL_PKG=DIR`)
"""
import glob
import gzip
import lzma
import os
import re
import struct
import subprocess
import sys
import tempfile

BTF_HEADER = struct.Struct("<HBBIIIII")  # magic, version, flags, hdr_len, type_off, type_len, str_off, str_len
BTF_START = b"\x9f\xeb\x01\x00\x18\x00\x00\x00"  # magic 0xeB9F little-endian, version 1, flags 0, hdr_len 24
# the modules whose structures bpf/ reads (struct loop_device, z_erofs_decompress_req, squashfs_sb_info,
# btrfs_inode, ...): built into the host's kernel, modules in Debian's
MODULES = ("loop", "erofs", "squashfs", "btrfs")


def candidates(data):
    """(offset, length) of every BTF header in data whose sections lie inside it, largest first."""
    found = []
    at = data.find(BTF_START)
    while at >= 0:
        _, _, _, hdr_len, type_off, type_len, str_off, str_len = BTF_HEADER.unpack_from(data, at)
        size = hdr_len + max(type_off + type_len, str_off + str_len)
        if type_len and str_len and at + size <= len(data):
            found.append((at, size))
        at = data.find(BTF_START, at + 1)
    return sorted(found, key=lambda c: -c[1])


def bpftool_c(path, base=None):
    """bpftool's C dump of the BTF in path (over the base BTF), or None if bpftool does not accept it."""
    p = subprocess.run(["bpftool"] + (["-B", base] if base else []) + ["btf", "dump", "file", path, "format", "c"],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return p.stdout if p.returncode == 0 else None


def raw_btf(path, out, base=None):
    """The BTF in a kernel image or module file (gzip or xz compressed or not) written to out as raw BTF; returns
    bpftool's C dump of it (over the base BTF: a module's is split BTF).  Found by its header, not as an ELF
    section: the image is no ELF file, and bookworm's bpftool refuses another architecture's modules."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    elif path.endswith(".xz"):
        data = lzma.decompress(data)
    for at, size in candidates(data):
        with open(out, "wb") as f:
            f.write(data[at:at + size])
        text = bpftool_c(out, base)
        if text:
            return text
    raise SystemExit("vmlinux_h: no BTF in %s (a kernel built without CONFIG_DEBUG_INFO_BTF?)" % path)


def blocks(text):
    """The definitions of a bpftool C dump, in order (it separates them by blank lines)."""
    return [b.strip("\n") for b in text.split("\n\n") if b.strip()]


def names(block):
    """The names a definition of a bpftool C dump declares: its struct, union or enum tag, typedef, enumerators."""
    found = {"%s %s" % m for m in re.findall(r"^(struct|union|enum) (\w+) \{", block, re.M)}
    found |= {"typedef " + m for m in re.findall(r"^typedef .*?\(?\**(\w+)\)?(?:\(.*\))?(?:\[\d*\])*;$", block, re.M)}
    if block.startswith("typedef "):  # of a type defined in it: typedef struct {...} name;
        found |= {"typedef " + m for m in re.findall(r"^\} (\w+);$", block, re.M)}
    if re.match(r"(typedef )?enum( \w+)? \{", block):
        found |= {"enumerator " + m for m in re.findall(r"^\t(\w+) = ", block, re.M)}
    return found


def module_path(pkg, name):
    found = glob.glob(os.path.join(pkg, "lib", "modules", "*", "kernel", "**", name + ".ko*"), recursive=True)
    if not found:
        raise SystemExit("vmlinux_h: no module %s in %s" % (name, pkg))
    return found[0]


def merge(kernel, modules):
    """The header's definitions: the kernel's (a bpftool C dump's blocks), the modules' own ((name, their C dump
    over the kernel's BTF) each) before its last two (the attribute pop and the include guard's #endif).  A
    module's definition naming a type or enumerator already defined (btrfs's struct workspace beside another
    module's, erofs's and btrfs's mount option enumerators) is left out; returns (blocks, what was left out)."""
    seen, added, skipped = set(kernel), [], []
    defined = set().union(*(names(b) for b in kernel))
    for name, text in modules:
        for b in blocks(text):
            if b in seen:
                continue
            seen.add(b)
            clash = names(b) & defined
            if clash:
                skipped.append("%s: %s" % (name, ",".join(sorted(clash))))
                continue
            defined.update(names(b))
            added.append(b)
    return kernel[:-2] + added + kernel[-2:], skipped


def main():
    if len(sys.argv) != 3:
        raise SystemExit("usage: python3 -m scripts.vmlinux_h KERNEL_PACKAGE_DIR OUT")
    pkg, out = sys.argv[1:]
    images = glob.glob(os.path.join(pkg, "boot", "vmlinuz-*"))
    if not images:
        raise SystemExit("vmlinux_h: no boot/vmlinuz-* in %s" % pkg)
    with tempfile.TemporaryDirectory() as tmp:
        base = os.path.join(tmp, "vmlinux.btf")
        kernel = blocks(raw_btf(images[0], base))
        modules = [(name, raw_btf(module_path(pkg, name), os.path.join(tmp, name + ".btf"), base))
                   for name in MODULES]
    header, skipped = merge(kernel, modules)
    if skipped:
        print("vmlinux_h: left out, named as a type before: " + "; ".join(skipped), file=sys.stderr)
    with open(out + ".tmp", "w") as f:
        f.write("\n\n".join(header) + "\n")
    os.replace(out + ".tmp", out)


if __name__ == "__main__":
    main()
