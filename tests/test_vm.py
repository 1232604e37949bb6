"""The fentry tier and its kprobe twins on real Debian kernels under QEMU (scripts/vmtest.py's guests).

The decompression, squashfs cache and btrfs write-compression probes, and the request boundaries at the filesystems'
entry points, need fentry or kprobes, which a host's kernel may refuse or lack; these guests prove them on Debian's
own kernels whatever the host's kernel allows. A session fixture boots one guest per kernel of the matrix
(FSTRACE_VM_KERNELS, default all of vmtest.KERNELS; one vCPU under TCG, two under KVM, or FSTRACE_VM_SMP; the guests
boot side by side when the host has a core per vCPU), which traces cold reads of erofs, squashfs (xz, lz4) and btrfs
(zstd) images and seed 004's cp -a && sync onto a compress=zstd:1 btrfs, once per tier, then fio's reads and a tree
walk with the requests bounded by each tier; the guest's results files are extracted on the host and the tests below
assert on them, against the images' own layout, the bytes the workload read, the files copied, fio's own counts and
the other tiers of the same run. The arm64 kernels' guests (qemu-system-aarch64, the collector cross-built by make
ARCH=arm64) run the request bounds and the scattered reads only (vmtest.STEPS; the other tests skip there and say
why), and one of their results files is reported by fstrace report on the host."""
import concurrent.futures
import json
import os
import shutil
import subprocess
import tempfile
import time

import pytest

from analysis import units
from conftest import FSTRACE
from scripts import vmtest

KERNELS = [k for k in os.environ.get("FSTRACE_VM_KERNELS", ",".join(vmtest.KERNELS)).split(",") if k]
SMP = int(os.environ.get("FSTRACE_VM_SMP", "0"))  # 0: vmtest.vcpus chooses by accelerator
# every guest of the session (retries included) within this many seconds, so a stalled guest cannot hold CI. A
# guest's own limit is generous because under TCG its time is the host's: each vCPU is one host thread, shared
# with the other guests booted side by side and with whatever else the host runs, so a loaded host stretches a
# healthy guest several times over; a hung guest is caught sooner, by its silent console (vmtest.SILENCE_S).
BUDGET_S = int(os.environ.get("FSTRACE_VM_BUDGET_S", "1800"))
GUEST_TIMEOUT_S = 1200
CACHE = os.environ.get("FSTRACE_CACHE", "/var/cache/fstrace")
READS = [e[0] for e in vmtest.IMAGES + vmtest.EROFS_MORE]


def _failed(e):
    """A kernel that could not be prepared: its tests fail with this, the other kernels' run."""
    f = concurrent.futures.Future()
    f.set_exception(e)
    return f


@pytest.fixture(scope="session")
def vm_host(request):
    """The dataset and images, shared by every kernel, and a work directory removed at the end; the guest of
    every kernel the session's tests ask for started at once, as many side by side as this process may use
    cores for their vCPUs (TCG runs a vCPU on a host thread), so the matrix costs about one guest's time when the
    host has a core per vCPU."""
    src, paths, skipped = vmtest.prepare(CACHE)
    wanted = [k for k in KERNELS if any(getattr(i, "callspec", None) and i.callspec.params.get("kname") == k
                                        for i in request.session.items)]
    deadline = time.monotonic() + BUDGET_S
    vmcache = os.path.join(CACHE, "vmtest")
    os.makedirs(vmcache, exist_ok=True)
    work = tempfile.mkdtemp(prefix="fstrace-test-vm-")
    runs, pool = {}, None
    try:
        jobs = []
        for kname in wanted:  # downloads and probes one at a time: they share the cache's files
            try:
                vmlinuz, moddir = vmtest.kernel(vmcache, kname)
                arch = vmtest.kernel_arch(kname)
                images_run, why = vmtest.images_for(vmlinuz, paths, skipped, arch)
                accel = vmtest.choose_accel("auto", vmlinuz, vmcache, arch)
                userland = vmtest.guest_userland(vmcache, arch)
            except (Exception, SystemExit) as e:
                runs[kname] = _failed(e if isinstance(e, Exception) else RuntimeError(str(e)))
                continue
            jobs.append((kname, vmlinuz, moddir, images_run, why, accel, vmtest.vcpus(SMP, accel), userland))

        def boot(kname, vmlinuz, moddir, images_run, why, accel, smp, userland):
            kwork = os.path.join(work, kname)
            os.makedirs(kwork)
            run = vmtest.run_guest_retrying(kname, vmlinuz, moddir, images_run, paths, src, kwork, smp, accel,
                                            GUEST_TIMEOUT_S, deadline=deadline, userland=userland)
            run["skipped"] = why
            return run

        if jobs:
            cores = len(os.sched_getaffinity(0))
            pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=max(1, min(len(jobs), cores // max(j[6] for j in jobs))))
            runs.update({j[0]: pool.submit(boot, *j) for j in jobs})
        yield {"src": src, "paths": paths, "skipped": skipped, "work": work, "runs": runs}
    finally:
        if pool:
            pool.shutdown(wait=True, cancel_futures=True)
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture
def guest(vm_host, request):
    """The guest run of the test's kernel (booted once per session), its results extracted on the host."""
    kname = request.node.callspec.params["kname"]
    run = vm_host["runs"][kname].result()
    if request.node.originalname != "test_guest_finished" and not run["finished"]:
        pytest.fail("the %s guest did not finish (see test_guest_finished)" % kname)
    return run


def _needs_step(guest, step):
    """Skip a test of a step the guest's architecture does not run (vmtest.STEPS; docs/vmtest.md says why)."""
    if step not in guest["steps"]:
        pytest.skip("the %s guest runs only the steps %s (docs/vmtest.md)" % (guest["arch"], ", ".join(guest["steps"])))


@pytest.mark.vm
@pytest.mark.parametrize("kname", KERNELS)
def test_guest_finished(guest, kname):
    """The guest ran every step with no soft lockup, RCU stall or hung task on its console, on the kernel asked."""
    tail = open(guest["console"], errors="replace").read()[-6000:]
    assert guest["finished"], "qemu exit %s after %s s:\n%s" % (guest["qemu_exit"], guest["seconds"], tail)
    assert not guest["lockup"], "\n".join(guest["lockup"]) + "\n" + tail
    kver = vmtest.guest_kernel(guest["outdir"])
    assert kver.startswith(kname.split("-")[0] + ".") and kver.endswith("-" + guest["arch"]), kver


@pytest.mark.vm
@pytest.mark.parametrize("image", READS)
@pytest.mark.parametrize("kname", KERNELS)
def test_read_probes(guest, kname, image, vm_host):
    """Decompression records of one image on both tiers: from the tier asked, the algorithm the image was built
    with, unit sizes within the image's cluster/block size, output covering the bytes read; erofs's against the
    workqueue tier and its own tracepoints of the same run; squashfs's cache lookups against the image's
    metadata and fragment blocks, and the device bytes outside the blocks it read against its layout."""
    _needs_step(guest, "run")
    entry = [e for e in guest["images"] if e[0] == image]
    if not entry:
        pytest.skip("%s not run on %s: %s" % (image, kname, guest["skipped"][image]))
    name, fs, opts, alg = entry[0]
    failures, lines = [], []
    vmtest.check_image(guest["outdir"], name, fs, opts, alg, vm_host["paths"][name], failures.append, lines)
    assert not failures, "\n".join(failures + lines)
    counted = [l for l in lines if l.startswith(name + " ") and " tier " in l]
    assert len(counted) == 2, lines  # one decompression line per tier, each with records (else a failure above)


@pytest.mark.vm
@pytest.mark.parametrize("image", vmtest.SCATTERED)
@pytest.mark.parametrize("kname", KERNELS)
def test_unneeded_share_of_scattered_squashfs_reads(guest, kname, image, vm_host):
    """fio's 4 KiB random reads of one file alone on a squashfs image: every block read is one of the image's, and
    the device bytes outside the blocks read (the summary's device_unneeded) are those that squashfs_bio_read's
    whole 1 KiB device blocks around them give, with the device's bytes /proc/diskstats' and some outside."""
    _needs_step(guest, "scattered")
    if image not in [e[0] for e in guest["images"]]:
        pytest.skip("%s not run on %s: %s" % (image, kname, guest["skipped"].get(image)))
    failures, lines = [], []
    vmtest.check_scattered(guest["outdir"], image, vm_host["paths"][image], failures.append, lines)
    assert not failures, "\n".join(failures + lines)


@pytest.mark.vm
@pytest.mark.parametrize("image", vmtest.SCATTERED)
@pytest.mark.parametrize("kname", KERNELS)
def test_serve_options_load_no_record_only_squashfs_probe(guest, kname, image):
    """The same scattered reads under serve's collector options (--records none), where the function tiers exist:
    squashfs's cache-lookup and block-read probes, whose events are per-request records only, are not loaded (the
    header says why) and write nothing, while its decompression probe still times every block; the reads are
    counted in the kernel, as many and as many bytes as fio made."""
    _needs_step(guest, "scattered")
    if image not in [e[0] for e in guest["images"]]:
        pytest.skip("%s not run on %s: %s" % (image, kname, guest["skipped"].get(image)))
    failures, lines = [], []
    vmtest.check_scattered_serve(guest["outdir"], image, failures.append, lines)
    assert not failures, "\n".join(failures + lines)


@pytest.mark.vm
@pytest.mark.parametrize("kname", KERNELS)
def test_write_compression(guest, kname, vm_host):
    """btrfs compression on write, both tiers, against the files copied and the work items the tracepoint tier
    timed; from 6.6 on (trampolines take up to 12 arguments) the fentry run must use the fentry variant."""
    _needs_step(guest, "write")
    failures, lines = [], []
    kver = vmtest.guest_kernel(guest["outdir"])
    for name, _ in vmtest.WRITES:
        vmtest.check_writes(guest["outdir"], name, vm_host["src"], kver, failures.append, lines)
    assert not failures, "\n".join(failures + lines)
    tiers = {l.split()[1]: l.rsplit("; tier ", 1)[1] for l in lines if " btrfs compression: " in l}
    assert set(tiers) == {"fentry", "kprobe"}, lines
    if not vmtest.guest_has(guest["outdir"])["module_btf"]:  # btrfs's types unknown: unavailable on both, saying so
        assert all(t.startswith("unavailable: ") for t in tiers.values()), lines
        return
    assert tiers["kprobe"] == "kprobe"
    if vmtest.kver_tuple(kver) >= (6, 6):
        assert tiers["fentry"] == "fentry", lines
    else:  # 6.1: fentry refused on the 7-argument btrfs_compress_pages, the twin used and the reason given
        assert tiers["fentry"].startswith("kprobe (fentry: "), lines


@pytest.mark.vm
@pytest.mark.parametrize("image", vmtest.BOUNDS)
@pytest.mark.parametrize("kname", KERNELS)
def test_request_bounds(guest, kname, image):
    """Requests bounded at the filesystem's entry points, by fentry and by kprobes (--no-fentry), against fio's
    own count and bytes and against the syscall tracepoints on the same cold workload (fio's random reads, a
    listing and a cat of the tree): the same reads as fio made, the same count and bytes of every other kind,
    parts adding up to wall time, and the header naming the tier that bounded them."""
    entry = [e for e in guest["images"] if e[0] == image]
    if not entry:
        pytest.skip("%s not run on %s: %s" % (image, kname, guest["skipped"][image]))
    failures, lines = [], []
    vmtest.check_bounds(guest["outdir"], image, failures.append, lines)
    assert not failures, "\n".join(failures + lines)
    at = {l.split()[2]: l.split(" at ", 1)[1].split(" fio ")[0].strip() for l in lines if " fio " in l}
    # a kernel without bpf_task_pt_regs (as the guest's kallsyms shows) bounds them at the syscall tracepoints
    function_tiers = vmtest.bounds_expected(guest["outdir"])
    assert at == {"fentry": function_tiers, "kprobe": function_tiers, "syscall": "syscall tracepoints"}, lines


@pytest.mark.vm
@pytest.mark.parametrize("kname", KERNELS)
def test_untraced_syscall_cost_measured(guest, kname):
    """The cost step measured an untraced task's getppid and preads with nothing attached and with the fentry
    and syscall tracepoint tiers attached (the figures are printed by make vmtest, not judged here: no timing
    thresholds)."""
    _needs_step(guest, "cost")
    failures, lines = [], []
    table = vmtest.check_cost(guest["outdir"], failures.append, lines)
    assert not failures, "\n".join(failures + lines)
    assert set(table) == set(vmtest.COST_CONFIGS)


@pytest.mark.vm
@pytest.mark.parametrize("kname", [k for k in KERNELS if vmtest.kernel_arch(k) != vmtest.HOST_ARCH])
def test_host_reports_a_run_of_another_architecture(guest, kname, tmp_path):
    """A results directory whose results the arm64 guest's collector wrote (fio's scattered 4 KiB reads of one
    squashfs file alone), reported by `fstrace report` on the x86 host: the guest's kernel, and as many reads and
    bytes as fio made by its own count."""
    _needs_step(guest, "scattered")
    name = vmtest.SCATTERED[0]
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(os.path.join(guest["outdir"], "scattered-%s.fst" % name), run / "results.fst")
    with open(os.path.join(guest["outdir"], "scattered-%s-fio.json" % name)) as f:
        text = f.read()
    fio = json.loads(text[text.index("{"):])["jobs"][0]["read"]
    p = subprocess.run([FSTRACE, "report", str(run)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.returncode == 0, p.stderr
    kver = vmtest.guest_kernel(guest["outdir"])
    assert p.stdout.splitlines()[0].endswith("kernel %s" % kver) and kver.endswith("-" + guest["arch"]), p.stdout
    assert "  reads: %d requests, %s in " % (fio["total_ios"], units.size(fio["io_bytes"])) in p.stdout, \
        (fio["total_ios"], fio["io_bytes"], p.stdout)


STALL = """[   55.95] NMI backtrace for cpu 1
[   55.95] Call Trace:
[   55.95]  asm_exc_int3+0x35/0x40
[   55.95] RIP: 0010:__schedule+0x1bc/0xa00
[  100.36] watchdog: BUG: soft lockup - CPU#0 stuck for 45s! [fstrace-collect:148]
[  100.36] RIP: 0010:smp_call_function_many_cond+0xf1/0x330
[  100.36]  text_poke_bp+0x4b/0x70
[  100.36]  tracepoint_probe_unregister+0x1a6/0x390
"""


# a 6.12 guest's console when the TCG text-poke fault strikes mid-run, at a link's release (abridged)
MID_RUN_INT3 = """vmguest: 120.4 s: reading squashfs (kprobe)
[  182.59] Oops: int3: 0000 [#1] PREEMPT SMP NOPTI
[  182.59] RIP: 0010:__schedule+0x34e/0xc00
[  182.59]  __cond_resched+0x48/0x70
[  182.59]  cpus_read_lock+0xe/0x60
[  182.59]  __static_call_update+0x55/0x230
[  182.59]  tracepoint_probe_unregister+0x1aa/0x390
[  182.59]  bpf_raw_tp_link_release+0x19/0x30
"""


@pytest.mark.unit
@pytest.mark.parametrize("text,accel,retried", [
    (STALL, "tcg", True),
    (STALL, "kvm", False),  # not the emulator's: fails at once
    (STALL.replace("asm_exc_int3+0x35/0x40", "bpf_prog_0123456789abcdef_x+0x10"), "tcg", False),  # other vCPU in BPF
    (STALL.replace("text_poke_bp", "mutex_lock"), "tcg", False),
    ("[ 2.95] Oops: int3: 0000 [#1] PREEMPT SMP NOPTI\n[ 2.96] RIP: 0010:sched_clock_cpu+0x9/0x190\n", "tcg", True),
    ("vmguest: 6.58 s: reading erofs (fentry)\n[ 9.1] Oops: int3: 0000 [#1]\n", "tcg", False),  # while tracing
    # mid-run, the same fault seen at a link's release (6.12): the scheduler's int3, no BPF frame, a static call
    # being repatched on the other vCPU; retried.  With a BPF program in the picture it fails.
    (MID_RUN_INT3, "tcg", True),
    (MID_RUN_INT3.replace("__schedule+0x34e/0xc00\n", "bpf_prog_0123456789abcdef_x+0x10\n"), "tcg", False),
    (MID_RUN_INT3, "kvm", False),
])
def test_only_the_tcg_text_poke_stall_is_retried(tmp_path, text, accel, retried):
    """The one stall vmtest boots again for is the TCG picture the stacks showed (the collector's CPU waiting in
    text_poke_bp's IPI for a vCPU stuck in the int3 exception); any other stall fails the run."""
    console = tmp_path / "console.log"
    console.write_text(text)
    assert vmtest.tcg_text_poke_stall({"accel": accel, "finished": False, "console": str(console)}) is retried
