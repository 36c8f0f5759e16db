#!/usr/bin/env python3
# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations
# under the License.

"""GPU acceptance: the driver's own claim, probe and gate on a real GPU.

Run by ``tools/gpu-acceptance.sh`` (see there for what it needs and the
list of checks). Every check prints ``PASS``, ``FAIL`` or ``SKIP`` with
its reason. A SKIP proves nothing, so the run is accepted (exit status 0)
only when every check passed, or, with ``--allow-skips``, when none
failed; the status is 1 when a check failed and 2 when one was skipped
without ``--allow-skips`` (or none ran). The last line is always ``proven
N of M``: N checks passed of the M run, skipped and failed ones included
(:class:`Report`).

The code under test is this project's: :class:`nova_lxd_accel.client.
LXDClient` against the local LXD or Incus, :class:`nova_lxd_accel.accel.
AcceleratorInventory` (providers as nova would report them),
:class:`nova_lxd_accel.accel.binding.claims.Claims` (the device pinned into the
container), :class:`nova_lxd_accel.accel.health.probe.HostProbe` and
:class:`nova_lxd_accel.accel.health.gate.GpuGate` (the probe at release).
Only what the driver leaves to nova or to the daemon's CLI (starting a
program inside the container, mounting the host's CUDA library into it)
goes through ``lxc``/``incus``. The gate is read through its public
methods only (``refresh``, ``note_destroy``, ``verify_release``,
``apply``, ``unavailable_units``, ``view``, ``store``), and ``reserved``
is read where it matters, in nova's own provider tree after an update:
it is what keeps a dirty or held unit from being scheduled.

A CUDA program (``holder``: ``cuInit``, ``cuCtxCreate``, ``cuMemAlloc`` of
N MiB through the host's ``libcuda.so.1``, then it sleeps) holds GPU memory
from inside a container, or on the host. It is built on the GPU host with
its C compiler (``cc``/``gcc``, or nvcc) from ``holder.c`` written here.

MIG settings are never changed (no ``nvidia-smi mig`` nor ``-mig``): MIG
is checked only where it is already on.
"""

import argparse
import json
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import uuid

from oslo_config import cfg

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from nova.compute import provider_tree  # noqa: E402

from nova_lxd_accel.accel.binding import claims  # noqa: E402
from nova_lxd_accel.accel import devices  # noqa: E402
from nova_lxd_accel.accel.health import gate  # noqa: E402
from nova_lxd_accel.accel.health import gate_state  # noqa: E402
from nova_lxd_accel.accel.inventory import reporter  # noqa: E402
from nova_lxd_accel import client as lxd_client  # noqa: E402
from nova_lxd_accel import conf as lxd_conf  # noqa: E402
from nova_lxd_accel import exception  # noqa: E402
from nova_lxd_accel import placement_names  # noqa: E402

NODE = 'gpu-acceptance'
ROOT = '00000000-0000-4000-8000-0000000acce9'
PREFIX = 'gpuaccept-%d-' % os.getpid()
HOLD_MIB = 512
#: the aim of issue 25: a clean unit free within 2 s of its container gone
RELEASE_AIM_S = 2.0
#: how long a check waits for a released unit to be verified clean once
#: what held it has exited, before it calls it a failure
CLEAN_WAIT_S = 30.0
#: ``[lxd_accelerators] nvidia_smi_timeout`` of the failing-probe check,
#: and how long its hanging nvidia-smi sleeps: far past that timeout
SHIM_TIMEOUT_S = 1
SHIM_HANG_S = 30
#: ``probe_failures_before_hold`` of the failing-probe check: the last of
#: them hangs, the others exit 1, so both kinds are shown to count
FAILURES_BEFORE_HOLD = 3
#: what nvidia-smi may call the holder: its path, or the host loader's
#: when it runs in a container through that loader (start_holder_in)
HOLDER_NAMES = ('holder', 'ld-linux')

FAILING_NVIDIA_SMI = '''#!/bin/sh
# gpu-acceptance: an nvidia-smi whose driver does not answer
echo "NVIDIA-SMI has failed: no answer from the NVIDIA driver" >&2
exit 1
'''
HANGING_NVIDIA_SMI = '''#!/bin/sh
# gpu-acceptance: an nvidia-smi stuck far past the probe's timeout
exec sleep %d
''' % SHIM_HANG_S

HOLDER_C = r'''
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
typedef int (*fn)();
int main(int argc, char **argv) {
    size_t mib = argc > 1 ? strtoul(argv[1], 0, 10) : 512;
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (!cuda) { fprintf(stderr, "no libcuda.so.1: %s\n", dlerror());
                 return 2; }
    fn init = (fn)dlsym(cuda, "cuInit");
    fn get = (fn)dlsym(cuda, "cuDeviceGet");
    fn ctx = (fn)dlsym(cuda, "cuCtxCreate_v2");
    fn alloc = (fn)dlsym(cuda, "cuMemAlloc_v2");
    int device = 0, rc;
    void *context = 0;
    unsigned long long pointer = 0;
    if ((rc = init(0))) { fprintf(stderr, "cuInit: %d\n", rc); return 3; }
    if ((rc = get(&device, 0))) { fprintf(stderr, "cuDeviceGet: %d\n", rc);
                                  return 3; }
    if ((rc = ctx(&context, 0, device))) {
        fprintf(stderr, "cuCtxCreate: %d\n", rc); return 3; }
    if ((rc = alloc(&pointer, mib << 20))) {
        fprintf(stderr, "cuMemAlloc %zu MiB: %d\n", mib, rc); return 4; }
    printf("holding %zu MiB\n", mib);
    fflush(stdout);
    for (;;) pause();
}
'''


class Report(object):
    """PASS, FAIL or SKIP per check, and what the run proved.

    A SKIP proves nothing: a run with one is accepted only when skips are
    allowed (``--allow-skips``, for a host known to lack MIG or MPS), and
    a run with a FAIL never is. The last line says how much was proven,
    so the tail of a log answers alone.

    :param allow_skips: whether skipped checks still let the run pass.
    :param out: the stream written to (default: ``sys.stdout`` at the time
        of each line).
    """

    #: exit statuses: accepted, a check failed, something not proven
    ACCEPTED = 0
    FAILED = 1
    NOT_PROVEN = 2

    def __init__(self, allow_skips=False, out=None):
        self.allow_skips = allow_skips
        self.out = out
        self.passed = 0
        self.failed = 0
        self.skipped = 0

    @property
    def total(self):
        """Checks run: passed, failed and skipped."""
        return self.passed + self.failed + self.skipped

    def line(self, word, text):
        print('%-5s %s' % (word, text), file=self.out or sys.stdout,
              flush=True)

    def check(self, ok, text, why=''):
        if ok:
            self.passed += 1
            self.line('PASS', text)
        else:
            self.failed += 1
            self.line('FAIL', '%s%s' % (text, (': ' + why) if why else ''))
        return ok

    def skip(self, text, why):
        self.skipped += 1
        self.line('SKIP', '%s: %s' % (text, why))

    def fact(self, text):
        """What the hardware showed, not a check: never counted."""
        self.line('FACT', text)

    def status(self):
        """The exit status: 0 only when what was asked is proven."""
        if self.failed:
            return self.FAILED
        if not self.total or (self.skipped and not self.allow_skips):
            return self.NOT_PROVEN
        return self.ACCEPTED

    def verdict(self):
        """One sentence: accepted or not, and why."""
        if self.failed:
            return 'NOT accepted: %d check(s) failed, %d skipped' % (
                self.failed, self.skipped)
        if not self.total:
            return 'NOT accepted: no check ran'
        if self.skipped and not self.allow_skips:
            return ('NOT accepted: %d check(s) skipped, so not proven here '
                    '(--allow-skips accepts that)' % self.skipped)
        if self.skipped:
            return ('accepted with %d check(s) skipped (--allow-skips): '
                    'those are not proven here' % self.skipped)
        return 'accepted: every check passed'

    def last_line(self):
        return 'proven %d of %d' % (self.passed, self.total)

    def finish(self):
        """Print the verdict and, last, ``proven N of M``; the status."""
        out = self.out or sys.stdout
        sys.stderr.flush()
        print('\ngpu-acceptance: %s' % self.verdict(), file=out)
        print(self.last_line(), file=out, flush=True)
        return self.status()


class Conf(object):
    """A ConfigOpts of its own (``opts``), read from a file of its own.

    Values are written to the file, never set with ``set_override``:
    oslo.config keeps an override on the option group, which every
    ConfigOpts registering that group shares (``register_group`` copies
    it shallowly), so an override made for a check's second conf (shared
    GPUs, a failing nvidia-smi) would change the first conf too.
    """

    GROUP = 'lxd_accelerators'

    def __init__(self, args, state_dir, **values):
        self.path = state_dir + '.conf'
        self.endpoint = args.endpoint
        self.values = {'state_dir': state_dir,
                       'nvidia_smi_path': args.nvidia_smi,
                       'nvidia_binding': 'runtime',
                       'release_wait': args.release_wait,
                       'kernel_log': ''}
        self.values.update(values)
        self._write()
        self.opts = cfg.ConfigOpts()
        lxd_conf.register_opts(self.opts)
        self.opts([], default_config_files=[self.path])

    def _write(self):
        lines = []
        if self.endpoint:
            lines += ['[lxd]', 'endpoint = %s' % self.endpoint]
        lines.append('[%s]' % self.GROUP)
        for name, value in sorted(self.values.items()):
            if isinstance(value, (list, tuple)):
                value = ','.join(value)
            lines.append('%s = %s' % (name, value))
        with open(self.path, 'w') as f:
            f.write('\n'.join(lines) + '\n')

    def set(self, **values):
        """Change ``[lxd_accelerators]`` options: the file read again."""
        self.values.update(values)
        self._write()
        if not self.opts.reload_config_files():
            raise RuntimeError('cannot read %s again' % self.path)


def make_conf(args, state_dir, **values):
    """The driver's options for this run, and ``values`` of its own."""
    return Conf(args, state_dir, **values)


def _ours(record):
    """Whether a daemon's instance is one this run made."""
    return (record.get('name') or '').startswith(PREFIX)


class Host(object):
    """The daemon, inventory, claim and gate, wired as the driver does.

    The containers this run makes are the driver's own instances, as
    ``Owner.is_ours`` tells them apart in the driver: their units are not
    counted as foreign, so ``reserved`` in the tree is the gate's alone.
    """

    def __init__(self, args, conf):
        self.args = args
        self.conf = conf
        self.client = lxd_client.LXDClient(conf)
        reported = reporter.ReportedGpus()
        self.gate = gate.GpuGate(
            conf, self.client.list_containers, reported.gpus)
        self.inventory = reporter.AcceleratorInventory(
            self.client.resources, conf=conf,
            list_instances=self.client.list_all_instances, is_ours=_ours,
            reported=reported)
        self.claims = claims.Claims(self.client, conf, self.inventory,
                                    gate=self.gate)
        self.tree = provider_tree.ProviderTree()
        self.tree.new_root(NODE, ROOT)

    def update(self, probe=True):
        """One nova period: probe outside the lock, then the tree.

        :param probe: False updates the tree from the gate's last probe
            only, as under nova's lock (a check that counts failed probes
            must not add one).
        """
        if probe:
            self.gate.maybe_refresh()
        snapshot = self.inventory.refresh()
        # as LXDDriver.update_provider_tree: through the gate
        desired = self.inventory.desired_from(NODE, snapshot,
                                              self.gate.probed_gpus())
        self.inventory.write_tree(self.tree, NODE, self.gate.apply(desired),
                                  {}, snapshot.records)

    def providers(self):
        """[(rp uuid, device)] of the GPUs reported."""
        out = []
        for rp_uuid in self.tree.get_provider_uuids(NODE)[1:]:
            device = self.inventory.device_for_provider(rp_uuid)
            if isinstance(device, devices.Gpu) and device.is_nvidia:
                out.append((rp_uuid, device))
        return out

    def gated(self, pci):
        """The GPU's desired provider after the gate's ``apply()``.

        The inventory's desired providers from its last read of the host,
        through :meth:`GpuGate.apply` as the driver's
        ``update_provider_tree`` runs it; None when the GPU is not
        reported.
        """
        snapshot = self.inventory.snapshot()
        desired = self.inventory.desired_providers(
            NODE, snapshot.resources, snapshot.mig_text,
            self.gate.probed_gpus())
        for want in self.gate.apply(desired).values():
            if isinstance(want.device, devices.Gpu) and \
                    want.device.pci_address == pci:
                return want
        return None

    def cli(self, *argv, check=True):
        return subprocess.run([self.args.lxc] + list(argv), check=check,
                              capture_output=True, text=True)

    def new_container(self, allocations, instance=None):
        """A stopped container with the claimed units; (name, binding)."""
        name = PREFIX + uuid.uuid4().hex[:8]
        root = {'root': {'type': 'disk', 'path': '/',
                         'pool': self.conf.lxd.storage_pool}}
        self.client.create_container(
            name, {'user.nova_lxd_accel.instance_uuid': name}, root, [],
            source={'type': 'image', 'alias': self.args.image})
        return name, self.claims.claim(name, allocations, instance)

    def remove(self, name):
        """Remove as the driver does; (seconds to verified, keys left)."""
        released = self.gate.note_destroy(
            lambda: self.client.get_container(name))
        self.client.remove_container(name)
        gone = time.monotonic()
        left = self.gate.verify_release(released)
        return time.monotonic() - gone, left

    def why(self, keys):
        """What the gate says holds each of ``keys`` ('' for a free one)."""
        unavailable = self.gate.unavailable_units()
        return '; '.join((unavailable.get(key) or [''])[0]
                         for key in sorted(keys))

    def cleanup(self):
        for record in self.client.list_containers():
            if record['name'].startswith(PREFIX):
                self.client.remove_container(record['name'])
        self.gate.stop()


def reserved_in(host, rp_uuid, pci, rc):
    """``reserved`` of ``rc``: (in the gate's apply(), in the tree)."""
    want = host.gated(pci)
    applied = (want.inventory.get(rc) or {}).get('reserved') \
        if want is not None else None
    tree = (host.tree.data(rp_uuid).inventory.get(rc) or {}).get('reserved')
    return applied, tree


def check_reserved(report, host, rp_uuid, pci, rc, expected, text,
                   probe=True):
    """One check: ``rc`` of the GPU is reserved ``expected`` times.

    In the gate's ``apply()`` of the desired providers and in nova's
    provider tree after one update: what Placement would be told.
    """
    host.update(probe=probe)
    applied, tree = reserved_in(host, rp_uuid, pci, rc)
    return report.check(
        applied == expected and tree == expected,
        "%s: %s reserved %d in the gate's apply() and in the provider "
        "tree" % (text, rc, expected),
        'apply() gives %s, the tree %s' % (applied, tree))


def provider_views(host, rp_uuid, pci):
    """[(inventory, traits)] of the GPU: the gate's apply(), the tree."""
    want = host.gated(pci)
    data = host.tree.data(rp_uuid)
    return [(want.inventory, want.traits) if want else ({}, frozenset()),
            (data.inventory, data.traits)]


def describe_views(views):
    """``provider_views`` as a reason: reserved per class, GPU traits."""
    return "the gate's apply(): %s; the tree: %s" % tuple(
        '%s %s' % ({rc: r.get('reserved') for rc, r in inv.items()},
                   sorted(t for t in traits if t.startswith('CUSTOM_GPU_')))
        for inv, traits in views)


def wait_clean(host, keys, since, timeout=CLEAN_WAIT_S):
    """Verify ``keys`` until clean; (seconds since ``since``, keys left).

    :meth:`GpuGate.verify_release` probes every half second for at most
    ``release_wait`` seconds; this asks again until ``timeout``.
    """
    deadline = time.monotonic() + timeout
    left = set(keys)
    while True:
        left = host.gate.verify_release(left)
        seconds = time.monotonic() - since
        if not left or time.monotonic() >= deadline:
            return seconds, left
        time.sleep(gate.RELEASE_POLL)


def names_pid(text, pid):
    """Whether a reason names process ``pid``."""
    return bool(re.search(r'\bpid %d\b' % pid, text or ''))


def is_holder(name):
    return any(part in (name or '') for part in HOLDER_NAMES)


def build_holder(work):
    source = os.path.join(work, 'holder.c')
    with open(source, 'w') as f:
        f.write(HOLDER_C)
    for compiler in ('cc', 'gcc', 'nvcc'):
        if shutil.which(compiler):
            binary = os.path.join(work, 'holder')
            subprocess.run([compiler, '-O2', '-o', binary, source] +
                           ([] if compiler == 'nvcc' else ['-ldl']),
                           check=True)
            return binary
    return None


def host_dirs(binary):
    """Read-only host directories the holder needs inside a container."""
    loader = os.path.realpath('/lib64/ld-linux-x86-64.so.2')
    out = subprocess.run(['ldd', binary], capture_output=True,
                         text=True).stdout
    libs = [line.split('=>')[1].split()[0] for line in out.splitlines()
            if '=>' in line and '/' in line]
    cuda = subprocess.run(['sh', '-c', 'ldconfig -p | awk \'/libcuda.so.1 '
                           '.*x86-64/ {print $NF; exit}\''],
                          capture_output=True, text=True).stdout.strip()
    dirs = {os.path.dirname(binary), os.path.dirname(loader)}
    dirs |= {os.path.dirname(os.path.realpath(lib)) for lib in libs}
    if cuda:
        dirs.add(os.path.dirname(os.path.realpath(cuda)))
    return sorted(dirs), loader


def start_holder_in(host, name, binary, mib):
    """Start the holder in container ``name``; its Popen (lxc exec)."""
    dirs, loader = host_dirs(binary)
    for index, directory in enumerate(dirs):
        host.cli('config', 'device', 'add', name, 'host%d' % index, 'disk',
                 'source=%s' % directory, 'path=/run/host%d' % index,
                 'readonly=true')
    paths = ':'.join('/run/host%d' % i for i in range(len(dirs)))
    inside = lambda path: '/run/host%d/%s' % (  # noqa: E731
        dirs.index(os.path.dirname(path)), os.path.basename(path))
    return subprocess.Popen(
        [host.args.lxc, 'exec', name, '--', inside(loader), '--library-path',
         paths, inside(binary), str(mib)], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)


def gpu_uuid(host, gpu):
    """The GPU's ``GPU-<uuid>``: LXD's, else the probe's ('' unknown)."""
    if gpu.nvidia_uuid:
        return gpu.nvidia_uuid
    snapshot = host.gate.last_snapshot
    facts = snapshot.gpus.get(gpu.pci_address) if snapshot else None
    return getattr(facts, 'uuid', None) or ''


def start_holder_on_host(host, gpu, binary, mib=HOLD_MIB):
    """Start the holder on the host, on ``gpu`` alone; its Popen.

    Never an MPS client: a process of the host that no instance accounts
    for, as a leftover would be.
    """
    env = {k: v for k, v in os.environ.items()
           if not k.startswith('CUDA_MPS_')}
    env['CUDA_VISIBLE_DEVICES'] = gpu_uuid(host, gpu)
    return subprocess.Popen([binary, str(mib)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def wait_holding(process, timeout=60):
    """Whether the holder said it holds its memory within ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        ready, _, _ = select.select([process.stdout], [], [], min(left, 1))
        if not ready:
            continue
        line = process.stdout.readline()
        if line.startswith('holding'):
            return True
        if not line:
            return False


def holder_error(process):
    """Why a holder did not hold (never blocks on a live one)."""
    if process.poll() is None:
        return 'no "holding" line yet'
    return (process.stderr.read() or '').strip() or \
        'status %s' % process.returncode


def stop(process):
    """Kill a holder; the time it was seen gone (monotonic)."""
    process.kill()
    process.wait()
    return time.monotonic()


def apps_by_gpu(host):
    snapshot = host.gate.refresh()
    return {pci: [a.name for a in apps] for pci, apps in
            snapshot.apps.items()}


def run(args, report):
    work = tempfile.mkdtemp(prefix='gpu-acceptance-')
    # the container's root (a mapped uid) reads the holder from here
    os.chmod(work, 0o755)
    host = Host(args, make_conf(args, os.path.join(work, 'state')).opts)
    try:
        checks(args, report, host, work)
    finally:
        host.cleanup()
        shutil.rmtree(work, ignore_errors=True)


def guarded(report, title, function, *args):
    """Run one group of checks: an error in it is its FAIL, not the end.

    The groups after it still run (each cleans up what it made), so one
    broken part does not hide what the others prove.
    """
    try:
        function(*args)
    except Exception as exc:
        traceback.print_exc()
        sys.stderr.flush()
        report.check(False, title, '%s: %s' % (type(exc).__name__, exc))


def checks(args, report, host, work):
    daemon = host.client.daemon_info()
    report.line('INFO', 'daemon: %s %s' % (daemon.name, daemon.version))
    host.update()
    gpus = host.providers()
    if not report.check(bool(gpus), 'the inventory reports NVIDIA GPUs',
                        'none reported'):
        return
    for rp_uuid, gpu in gpus:
        data = host.tree.data(rp_uuid)
        report.line('INFO', '%s %s: %s, traits %s' % (
            gpu.pci_address, gpu.model, {rc: r['total'] for rc, r in
                                         data.inventory.items()},
            ' '.join(sorted(t for t in data.traits
                            if t.startswith('CUSTOM_GPU_')))))
    snapshot = host.gate.last_snapshot
    report.check(snapshot is not None and snapshot.available,
                 'the GPU probe reads every GPU (nvidia-smi)',
                 getattr(snapshot, 'error', 'no snapshot'))
    holds = host.gate.store.load()['holds']
    report.check(not holds, 'no GPU is held by the gate', json.dumps(holds))

    binary = build_holder(work)
    whole = [(rp, g) for rp, g in gpus if not g.mig_devices]
    if whole:
        guarded(report, 'whole-GPU claim and release end without an '
                'error', check_whole_gpu, report, host, whole[0], binary)
    else:
        report.skip('whole-GPU claim and release', 'every GPU is split '
                    'into MIG devices')
    guarded(report, 'the MIG checks end without an error', check_mig,
            report, host, gpus, binary)
    title = 'a shared GPU: MPS quotas and the release of its slots'
    if not whole:
        report.skip(title, 'no whole GPU to share')
    elif not shutil.which('nvidia-cuda-mps-control'):
        report.skip(title, 'no nvidia-cuda-mps-control on this host')
    elif binary is None:
        report.skip(title, 'no C compiler (cc, gcc or nvcc) for the CUDA '
                    'program')
    else:
        guarded(report, 'the shared GPU checks end without an error',
                check_mps, args, report, work, whole[0][1], binary)
    guarded(report, 'the failing nvidia-smi checks end without an error',
            check_unprobeable, args, report, work, (whole or gpus)[0][1])


def check_whole_gpu(report, host, provider, binary):
    """Claim, CUDA use, delete and a host process on one whole GPU."""
    rp_uuid, gpu = provider
    pci = gpu.pci_address
    allocation = {rp_uuid: {'resources': {'PGPU': 1}}}

    # 1. the claim pins exactly this GPU by PCI address
    name, bound = host.new_container(allocation)
    devs = {n: d for n, d in bound.devices.items() if d.get('type') == 'gpu'}
    report.check(list(devs.values()) == [{'type': 'gpu',
                                          'gputype': 'physical',
                                          'pci': pci}],
                 'the claim binds %s by its PCI address only' % pci,
                 json.dumps(devs))
    try:
        host.client.change_state(name, 'start')
        started = True
    except exception.LXDAccelException as exc:
        started = report.check(False, 'the container with %s starts' % pci,
                               str(exc))

    # 2. a CUDA program inside holds memory: seen on this GPU, no other
    title = 'a CUDA program in the container holds %d MiB' % HOLD_MIB
    if binary is None:
        report.skip(title, 'no C compiler (cc, gcc or nvcc) on this host')
    elif not started:
        report.skip(title, 'the container did not start')
    else:
        holder = start_holder_in(host, name, binary, HOLD_MIB)
        held = wait_holding(holder)
        report.check(held, title, '' if held else holder_error(holder))
        if held:
            apps = apps_by_gpu(host)
            report.check(
                any(is_holder(n) for n in apps.get(pci, [])) and not any(
                    is_holder(n) for p, v in apps.items() if p != pci
                    for n in v),
                'the probe sees it on %s and on no other GPU' % pci,
                json.dumps(apps))

    # 3. delete: verified clean within the aim
    seconds, left = host.remove(name)
    report.check(not left, 'deleted: %s verified clean %.2f s after its '
                 'container is gone (aim %.1f s)' % (pci, seconds,
                                                     RELEASE_AIM_S),
                 'still dirty: %s' % host.gate.unavailable_units())
    report.check(seconds <= RELEASE_AIM_S, 'release within the aim',
                 '%.2f s' % seconds)

    # 4. dirty to clean with a CUDA process of the host
    if binary is None:
        report.skip('a host process keeps a released GPU reserved',
                    'no C compiler (cc, gcc or nvcc) for the CUDA program')
    else:
        check_host_process(report, host, rp_uuid, gpu, binary, allocation)


def check_host_process(report, host, rp_uuid, gpu, binary, allocation):
    """A released GPU with a CUDA process of the host on it.

    The unit must stay dirty while the process runs, named in the reason,
    ``reserved`` in the provider tree and refused by the claim, and be
    verified clean (``reserved`` 0) once it exits; how long that took
    from its exit is printed.
    """
    pci = gpu.pci_address
    key = 'pci:' + pci
    name, _ = host.new_container(allocation)
    outside = start_holder_on_host(host, gpu, binary)
    try:
        if not wait_holding(outside):
            report.skip('a host process keeps a released GPU reserved',
                        'the holder could not hold memory on the host: '
                        + holder_error(outside))
            host.remove(name)
            return
        _seconds, left = host.remove(name)
        report.check(key in left, 'released with a host process (pid %d) '
                     'on %s: still dirty after the release wait' % (
                         outside.pid, pci), 'verified clean')
        # the reason as of a full periodic probe (the release wait's last
        # probe may have been cut short by its deadline)
        check_reserved(report, host, rp_uuid, pci, 'PGPU', 1,
                       'while it runs')
        why = host.why({key})
        report.check(names_pid(why, outside.pid), 'the reason names the '
                     'process: %s' % why, 'pid %d not named' % outside.pid)
        try:
            host.claims.claim(PREFIX + 'refused', allocation, None)
            report.check(False, 'the claim refuses the dirty GPU')
        except exception.AcceleratorUnavailable as exc:
            report.check('not verified clean' in str(exc),
                         'the claim refuses the dirty GPU', str(exc))
    finally:
        exited = stop(outside)
    seconds, left = wait_clean(host, {key}, exited)
    report.check(not left, 'the host process gone: %s verified clean %.2f s '
                 'after it exited' % (pci, seconds),
                 'still dirty %.0f s after: %s' % (seconds, host.why(left)))
    check_reserved(report, host, rp_uuid, pci, 'PGPU', 0, 'once clean')


def check_mig(report, host, gpus, binary):
    """A MIG slice claimed, released and verified clean.

    Only on a GPU already in MIG mode (``mig.mode.current`` Enabled, MIG
    devices listed by ``nvidia-smi -L``): MIG settings are never changed
    here, so a GPU without it is a SKIP with the reason.
    """
    title = 'MIG slice claim, release and verified clean'
    snapshot = host.gate.last_snapshot
    facts = snapshot.gpus if snapshot is not None else {}
    enabled = [(rp, g) for rp, g in gpus if (getattr(
        facts.get(g.pci_address), 'mig_mode', None) or '').lower() ==
        'enabled']
    if not enabled:
        report.skip(title, 'MIG is off on every GPU (mig.mode.current), '
                    'and MIG settings are never changed here')
        return
    listed = [(rp, g) for rp, g in enabled if g.mig_devices]
    if not listed:
        report.skip(title, 'MIG is on on %s but nvidia-smi -L lists no MIG '
                    'device; creating one is a MIG change, never made '
                    'here' % ', '.join(g.pci_address for _, g in enabled))
        return
    rp_uuid, gpu = listed[0]
    pci = gpu.pci_address
    rc = gpu.mig_devices[0].resource_class
    name, bound = host.new_container({rp_uuid: {'resources': {rc: 1}}})
    units = [u for u in bound.units if u.kind == 'mig']
    migs = {m.uuid: m for m in gpu.mig_devices}
    mig = migs.get(units[0].detail.get('mig_uuid')) if units else None
    if not report.check(
            len(units) == 1 and mig is not None and
            units[0].device.get('gputype') == 'mig',
            'the claim binds one %s MIG slice of %s%s' % (
                rc, pci, ' (%s)' % mig.uuid if mig else ''),
            json.dumps(bound.devices)):
        host.remove(name)
        return
    key = units[0].key
    try:
        host.client.change_state(name, 'start')
        started = True
    except exception.LXDAccelException as exc:
        started = report.check(False, 'the container with MIG slice %s '
                               'starts' % mig.uuid, str(exc))
    title = 'a CUDA program in the MIG slice holds %d MiB' % HOLD_MIB
    if binary is None:
        report.skip(title, 'no C compiler (cc, gcc or nvcc) on this host')
    elif not started:
        report.skip(title, 'the container did not start')
    else:
        holder = start_holder_in(host, name, binary, HOLD_MIB)
        held = wait_holding(holder)
        report.check(held, title, '' if held else holder_error(holder))
        if held:
            slice_facts = (host.gate.refresh().mig.get(pci) or {}).get(
                mig.index)
            names = [a.name for a in getattr(slice_facts, 'apps', ())]
            report.check(any(is_holder(n) for n in names),
                         'the probe sees it in MIG device %s' % mig.uuid,
                         'its processes: %s' % (
                             names if slice_facts else 'no facts of it'))
    seconds, left = host.remove(name)
    report.check(not left, 'MIG slice %s released: verified clean %.2f s '
                 'after its container is gone' % (mig.uuid, seconds),
                 'still dirty: %s' % host.why({key}))
    check_reserved(report, host, rp_uuid, pci, rc, 0, 'once clean')


class _Flavor(object):
    def __init__(self, memory_mb):
        self.extra_specs = {'lxd:gpu_memory_mb': str(memory_mb)}


class _Instance(object):
    """What the claim reads of an instance with a GPU memory quota."""

    def __init__(self, memory_mb):
        self.uuid = str(uuid.uuid4())
        self.project_id = 'gpu-acceptance'
        self.flavor = _Flavor(memory_mb)


def check_mps(args, report, work, gpu, binary, quota_mib=1024):
    """Two containers share the GPU through its MPS control daemon.

    The GPU is shared in 2 quota'd slots (``shared_gpus`` ``<pci>:2:quota``:
    a flavor with ``lxd:gpu_memory_mb`` lands only on a card of that mode);
    each container gets the driver's MPS devices and environment for
    ``lxd:gpu_memory_mb`` = ``quota_mib``. The control daemon runs as the
    admin guide says: its pipe directory, and its /dev/shm bound on the
    shm directory in a mount namespace of its own. Then the slots are
    released (:func:`check_slot_release`).
    """
    pci = gpu.pci_address
    pipe = os.path.join(work, 'mps-pipe')
    shm = os.path.join(work, 'mps-shm')
    logs = os.path.join(work, 'mps-log')
    for directory in (pipe, shm, logs):
        os.makedirs(directory, mode=0o777, exist_ok=True)
        os.chmod(directory, 0o777)
    conf = make_conf(args, os.path.join(work, 'state-mps'),
                     shared_gpus=['%s:2:quota' % pci],
                     mps_pipe_directory=pipe, mps_shm_directory=shm)
    host = Host(args, conf.opts)
    env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=pipe,
               CUDA_MPS_LOG_DIRECTORY=logs,
               CUDA_VISIBLE_DEVICES=gpu_uuid(host, gpu) or '0')
    subprocess.run(['unshare', '-m', 'sh', '-c',
                    'mount --bind "$0" /dev/shm && '
                    'exec nvidia-cuda-mps-control -d', shm],
                   env=env, check=False)
    try:
        host.update()
        shared = [rp for rp, g in host.providers()
                  if g.pci_address == pci and g.shared_slots]
        if not report.check(bool(shared), 'the inventory reports %s shared'
                            % pci, 'not shared'):
            return
        allocation = {shared[0]: {'resources': {'CUSTOM_GPU_SHARE': 1}}}
        slots = []
        for mib in (quota_mib * 2, quota_mib // 2):
            name, bound = host.new_container(allocation,
                                             _Instance(quota_mib))
            host.client.change_state(name, 'start')
            holder = start_holder_in(host, name, binary, mib)
            slots.append((name, {u.key for u in bound.units}, mib,
                          wait_holding(holder), holder))
        (_n, _k, over, over_held, over_proc), \
            (_n, _k, within, within_held, proc) = slots
        why = '' if over_held or over_proc.poll() is None else \
            over_proc.stderr.read()
        # refused by the allocation itself, not by a failure to start
        report.check(not over_held and 'cuMemAlloc' in why,
                     'MPS refuses %d MiB to a client with lxd:gpu_memory_mb '
                     '%d' % (over, quota_mib),
                     'it holds them' if over_held else why)
        report.check(within_held, 'MPS gives %d MiB to a client within its '
                     'quota' % within, '' if within_held else
                     holder_error(proc))
        check_slot_release(report, host, shared[0], gpu, binary,
                           slots[0][:2], slots[1][:2])
        mps_pipe_readonly_fact(report, host, allocation, binary, quota_mib)
    finally:
        host.cleanup()
        subprocess.run(['nvidia-cuda-mps-control'], input='quit\n',
                       text=True, env=env, check=False)


def mps_pipe_readonly_fact(report, host, allocation, binary, quota_mib):
    """Whether an MPS client works with the pipe directory read-only.

    The driver mounts it read-write (issue 43: read-only if MPS allows
    it); this prints what the card showed, as a FACT, for that decision.
    Run after every check of :func:`check_mps`, on a slot they left free.
    """
    name = None
    try:
        name, _bound = host.new_container(allocation, _Instance(quota_mib))
        host.cli('config', 'device', 'set', name, 'mps-pipe',
                 'readonly=true')
        host.client.change_state(name, 'start')
        holder = start_holder_in(host, name, binary, quota_mib // 2)
        held = wait_holding(holder)
        why = '' if held else ': ' + holder_error(holder)
        stop(holder)
        report.fact('mps_pipe_readonly=%s (a client holding %d MiB with '
                    'the MPS pipe directory mounted read-only%s)'
                    % ('works' if held else 'fails', quota_mib // 2, why))
    except Exception as exc:
        report.fact('mps_pipe_readonly=unknown (%s)' % exc)
    finally:
        if name is not None:
            host.remove(name)


def check_slot_release(report, host, rp_uuid, gpu, binary, first, last):
    """The release of a shared GPU's slots.

    ``first`` (a container and its slot keys) is released while ``last``
    still shares the card and a CUDA process of the host, which no
    instance accounts for, is on it: the slot must stay dirty, the
    process named, ``reserved`` in the tree, until the process exits.
    Then ``last`` is released: the card is verified with no sharer left.
    """
    pci = gpu.pci_address
    rc = placement_names.SHARE_RC
    (first_name, first_keys), (last_name, last_keys) = first, last
    outside = start_holder_on_host(host, gpu, binary)
    held = False
    try:
        held = wait_holding(outside)
        if not held:
            report.skip('a released slot stays reserved while a host '
                        'process is on the card', 'the holder could not '
                        'hold memory on the host beside the MPS clients: '
                        + holder_error(outside))
            host.remove(first_name)
        else:
            _seconds, left = host.remove(first_name)
            report.check(
                bool(first_keys) and first_keys <= left,
                'slot %s released while the card stays shared and a host '
                'process (pid %d) is on it: still dirty after the release '
                'wait' % (', '.join(sorted(first_keys)), outside.pid),
                'verified clean: %s' % sorted(first_keys - left))
            check_reserved(report, host, rp_uuid, pci, rc, 1,
                           'while it runs')
            why = host.why(first_keys)
            report.check(names_pid(why, outside.pid), 'the reason names '
                         'the process: %s' % why,
                         'pid %d not named' % outside.pid)
    finally:
        exited = stop(outside)
    if held:
        seconds, left = wait_clean(host, first_keys, exited)
        report.check(not left, 'the host process gone: the slot verified '
                     'clean %.2f s after it exited' % seconds,
                     'still dirty %.0f s after: %s' % (seconds,
                                                       host.why(left)))
        check_reserved(report, host, rp_uuid, pci, rc, 0, 'once clean')
    seconds, left = host.remove(last_name)
    if left:
        seconds, left = wait_clean(host, left, time.monotonic() - seconds)
    report.check(not left, 'the last slot released: %s verified clean '
                 '%.2f s after its container is gone (the MPS server '
                 'stays)' % (pci, seconds),
                 'still dirty %.0f s after: %s' % (seconds,
                                                   host.why(last_keys)))


def check_unprobeable(args, report, work, gpu):
    """A failing nvidia-smi: the GPUs held, no release declared clean.

    A second conf probes through shims: an ``nvidia-smi`` that exits 1,
    first on ``PATH`` (``nvidia_smi_path`` is the bare name, as by
    default), then, for the last of ``probe_failures_before_hold``
    probes, one that sleeps far past ``nvidia_smi_timeout`` (set as
    ``nvidia_smi_path``). Both must count: after that many the GPU is
    held as unprobeable (``reserved`` = total, trait
    ``CUSTOM_GPU_UNPROBEABLE``), not before; a unit released meanwhile
    is not declared clean; the real nvidia-smi answering lifts the hold
    and frees the unit.
    """
    pci = gpu.pci_address
    title = 'a failing nvidia-smi holds the GPUs as unprobeable'
    real = shutil.which(args.nvidia_smi)
    if real is None:
        report.skip(title, 'no %s on this host' % args.nvidia_smi)
        return
    real = os.path.abspath(real)
    failing = os.path.join(work, 'shim-failing')
    hanging = os.path.join(work, 'shim-hanging')
    for directory, text in ((failing, FAILING_NVIDIA_SMI),
                            (hanging, HANGING_NVIDIA_SMI)):
        os.makedirs(directory, exist_ok=True)
        shim = os.path.join(directory, 'nvidia-smi')
        with open(shim, 'w') as f:
            f.write(text)
        os.chmod(shim, 0o755)
    conf = make_conf(args, os.path.join(work, 'state-probe'),
                     nvidia_smi_path=real, nvidia_smi_timeout=SHIM_TIMEOUT_S,
                     probe_failures_before_hold=FAILURES_BEFORE_HOLD)
    host = Host(args, conf.opts)
    path = os.environ.get('PATH', '')
    try:
        host.update()
        found = [(rp, g) for rp, g in host.providers()
                 if g.pci_address == pci]
        if not report.check(bool(found), 'the second conf reports %s'
                            % pci, 'not reported'):
            return
        rp_uuid = found[0][0]
        inventory = host.tree.data(rp_uuid).inventory
        rc = sorted(inventory)[0]
        name, bound = host.new_container({rp_uuid: {'resources': {rc: 1}}})
        keys = {u.key for u in bound.units}
        if not report.check(bool(keys), 'the second conf claims one %s of '
                            '%s' % (rc, pci), json.dumps(bound.devices)):
            return

        # probes failing: exit 1 through PATH, then a hang
        os.environ['PATH'] = failing + os.pathsep + path
        conf.set(nvidia_smi_path='nvidia-smi')
        early = []
        for number in range(1, FAILURES_BEFORE_HOLD + 1):
            if number == FAILURES_BEFORE_HOLD:
                conf.set(nvidia_smi_path=os.path.join(hanging,
                                                      'nvidia-smi'))
            began = time.monotonic()
            snapshot = host.gate.refresh()
            took = time.monotonic() - began
            report.line('INFO', 'failing probe %d: %s (%.1f s)' % (
                number, snapshot.error, took))
            if number < FAILURES_BEFORE_HOLD and \
                    host.gate.store.load()['holds'].get(pci):
                early.append(number)
        report.check(not snapshot.available and
                     took < SHIM_TIMEOUT_S + 2.5,
                     'a hanging nvidia-smi fails the probe in %.1f s '
                     '(nvidia_smi_timeout %d s)' % (took, SHIM_TIMEOUT_S),
                     snapshot.error or 'it answered')
        hold = host.gate.store.load()['holds'].get(pci) or {}
        report.check(
            not early and hold.get('kind') == gate_state.KIND_UNPROBEABLE,
            'after %d failed probes, not before, %s is held as %s: %s' % (
                FAILURES_BEFORE_HOLD, pci, gate_state.KIND_UNPROBEABLE,
                hold.get('reason')),
            'held after probe(s) %s; hold %s' % (early, json.dumps(hold)))
        host.update(probe=False)
        views = provider_views(host, rp_uuid, pci)
        report.check(
            all(inv and all(r['reserved'] == r['total']
                            for r in inv.values()) and
                gate.TRAIT_UNPROBEABLE in traits
                for inv, traits in views),
            "so the gate's apply() and the provider tree reserve all of %s "
            'with %s' % (pci, gate.TRAIT_UNPROBEABLE),
            describe_views(views))

        # a release while the probe fails (it hangs) is not clean
        _seconds, left = host.remove(name)
        after_verify = set(left)
        host.gate.refresh()
        dirty = set(host.gate.view().dirty)
        report.check(
            bool(keys) and keys <= after_verify and keys <= dirty,
            'released while nvidia-smi fails: %s not declared clean, by '
            'the release nor by the next probe: %s' % (
                ', '.join(sorted(keys)), host.why(keys)),
            'freed at release: %s, by the probe: %s' % (
                sorted(keys - after_verify), sorted(keys - dirty)))

        # the real nvidia-smi again
        os.environ['PATH'] = path
        conf.set(nvidia_smi_path=real)
        snapshot = host.gate.refresh()
        hold = host.gate.store.load()['holds'].get(pci)
        report.check(snapshot.available and not hold,
                     'the real nvidia-smi answers again: the hold on %s '
                     'is lifted' % pci,
                     snapshot.error or 'hold: %s' % json.dumps(hold))
        left = host.gate.verify_release(keys)
        host.update(probe=False)
        views = provider_views(host, rp_uuid, pci)
        report.check(
            not left and all(
                inv and not any(r['reserved'] for r in inv.values()) and
                gate.TRAIT_UNPROBEABLE not in traits
                for inv, traits in views),
            'and the released unit is verified clean: %s reserved 0, '
            'without %s' % (pci, gate.TRAIT_UNPROBEABLE),
            'still dirty: %s; %s' % (host.why(left) or 'none',
                                     describe_views(views)))
    finally:
        os.environ['PATH'] = path
        host.cleanup()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--lxc', default=os.environ.get('LXC', 'lxc'),
                        help='lxc or incus (the CLI for exec and mounts)')
    parser.add_argument('--endpoint', default=None,
                        help='[lxd] endpoint (default: discovered)')
    parser.add_argument('--image', default='tiny')
    parser.add_argument('--nvidia-smi', default='nvidia-smi')
    parser.add_argument('--release-wait', type=float, default=5.0)
    parser.add_argument('--allow-skips', action='store_true',
                        help='exit 0 when no check failed, even if some '
                        'were skipped (by default a SKIP fails the run: '
                        'it proves nothing)')
    args = parser.parse_args(argv)
    report = Report(allow_skips=args.allow_skips)
    try:
        run(args, report)
    except Exception as exc:
        traceback.print_exc()
        sys.stderr.flush()
        report.check(False, 'the acceptance run ends without an error',
                     '%s: %s' % (type(exc).__name__, exc))
    return report.finish()


if __name__ == '__main__':
    sys.exit(main())
