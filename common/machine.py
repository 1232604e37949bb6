"""What a run ran on, one record for every kind of run (a bench, an overhead run, the VM tests): written into
what the run stores, and read back through stored() so that files written before these keys still render."""
import os
import platform
import shutil
import socket
import subprocess


def _first(path, prefix):
    """The value of a /proc file's first "prefix: value" line, None without one or without the file."""
    try:
        with open(path) as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith(prefix)), None)
    except OSError:
        return None


def _detect_virt(kind):
    """systemd-detect-virt's answer for kind (--vm, --container), None for none or without the command."""
    if not shutil.which("systemd-detect-virt"):
        return None
    answer = subprocess.run(["systemd-detect-virt", kind], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True).stdout.strip()
    return answer if answer and answer != "none" else None


def record():
    """This machine: host name, architecture, kernel, CPU model and count, memory, and the hypervisor and
    container it runs in, if any."""
    u = os.uname()
    return {"host": socket.gethostname(), "arch": u.machine, "kernel": u.release,
            "cpu": _first("/proc/cpuinfo", "model name") or platform.processor() or None, "cpus": os.cpu_count(),
            "memory_bytes": os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"),
            "vm": _detect_virt("--vm"), "container": _detect_virt("--container")}


def stored(rec):
    """A machine record as a file stored it, in record()'s keys: `make bench-overhead` runs before this module
    wrote the CPU as cpu_model and the memory as memory_gib (GiB, one decimal)."""
    if not rec:
        return rec
    out = dict(rec)
    if "cpu_model" in out:
        out.setdefault("cpu", out.pop("cpu_model"))
    if "memory_gib" in out:
        gib = out.pop("memory_gib")
        out.setdefault("memory_bytes", None if gib is None else round(gib * (1 << 30)))
    return out
