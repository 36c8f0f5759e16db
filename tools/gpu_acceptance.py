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

Run by ``tools/gpu-acceptance.sh`` (see there for what it needs). Every
check prints ``PASS``, ``FAIL`` or ``SKIP`` with its reason; the exit
status is the number of failures (0: accepted).

The code under test is this project's: :class:`nova_lxd_accel.client.
LXDClient` against the local LXD or Incus, :class:`nova_lxd_accel.accel.
AcceleratorInventory` (providers as nova would report them),
:class:`nova_lxd_accel.accel.claims.Claims` (the device pinned into the
container), :class:`nova_lxd_accel.accel.gpu_probe.HostProbe` and
:class:`nova_lxd_accel.accel.gpu_gate.GpuGate` (the probe at release).
Only what the driver leaves to nova or to the daemon's CLI (starting a
program inside the container, mounting the host's CUDA library into it)
goes through ``lxc``/``incus``.

A CUDA program (``holder``: ``cuInit``, ``cuCtxCreate``, ``cuMemAlloc`` of
N MiB through the host's ``libcuda.so.1``, then it sleeps) holds GPU memory
from inside a container, or on the host. It is built on the GPU host with
its C compiler (``cc``/``gcc``, or nvcc) from ``holder.c`` written here.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

from oslo_config import cfg

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from nova.compute import provider_tree  # noqa: E402

from nova_lxd_accel.accel import claims as accel_claims  # noqa: E402
from nova_lxd_accel.accel import devices  # noqa: E402
from nova_lxd_accel.accel import gpu_gate  # noqa: E402
from nova_lxd_accel.accel import inventory as accel_inventory  # noqa: E402
from nova_lxd_accel import client as lxd_client  # noqa: E402
from nova_lxd_accel import conf as lxd_conf  # noqa: E402
from nova_lxd_accel import exception  # noqa: E402

NODE = 'gpu-acceptance'
ROOT = '00000000-0000-4000-8000-0000000acce9'
PREFIX = 'gpuaccept-%d-' % os.getpid()
HOLD_MIB = 512
#: the aim of issue 25: a clean unit free within 2 s of its container gone
RELEASE_AIM_S = 2.0

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

    def __init__(self):
        self.failed = 0

    def line(self, word, text):
        print('%-5s %s' % (word, text), flush=True)

    def check(self, ok, text, why=''):
        if ok:
            self.line('PASS', text)
        else:
            self.failed += 1
            self.line('FAIL', '%s%s' % (text, (': ' + why) if why else ''))
        return ok

    def skip(self, text, why):
        self.line('SKIP', '%s: %s' % (text, why))


def make_conf(args, state_dir):
    conf = cfg.ConfigOpts()
    lxd_conf.register_opts(conf)
    conf([], default_config_files=[])
    if args.endpoint:
        conf.set_override('endpoint', args.endpoint, group='lxd')
    group = 'lxd_accelerators'
    conf.set_override('state_dir', state_dir, group=group)
    conf.set_override('nvidia_smi_path', args.nvidia_smi, group=group)
    conf.set_override('nvidia_binding', 'runtime', group=group)
    conf.set_override('release_wait', args.release_wait, group=group)
    conf.set_override('kernel_log', '', group=group)
    return conf


class Host(object):
    """The daemon, inventory, claim and gate, wired as the driver does."""

    def __init__(self, args, conf):
        self.args = args
        self.conf = conf
        self.client = lxd_client.LXDClient(conf)
        reported = accel_inventory.ReportedGpus()
        self.gate = gpu_gate.GpuGate(
            conf, self.client.list_containers, reported.gpus)
        self.inventory = accel_inventory.AcceleratorInventory(
            self.client.resources, conf=conf,
            list_instances=self.client.list_all_instances, gate=self.gate,
            reported=reported)
        self.claims = accel_claims.Claims(
            self.client, conf, self.inventory.device_for_provider,
            self.inventory.all_devices, self.gate.unavailable_units)
        self.tree = provider_tree.ProviderTree()
        self.tree.new_root(NODE, ROOT)

    def update(self):
        """One nova period: probe outside the lock, then the tree."""
        self.gate.maybe_refresh()
        self.inventory.refresh()
        self.inventory.update_provider_tree(self.tree, NODE, {})

    def providers(self):
        """[(rp uuid, device)] of the GPUs reported."""
        out = []
        for rp_uuid in self.tree.get_provider_uuids(NODE)[1:]:
            device = self.inventory.device_for_provider(rp_uuid)
            if isinstance(device, devices.Gpu) and device.is_nvidia:
                out.append((rp_uuid, device))
        return out

    def cli(self, *argv, check=True):
        return subprocess.run([self.args.lxc] + list(argv), check=check,
                              capture_output=True, text=True)

    def new_container(self, allocations):
        """A stopped container with the claimed units; (name, binding)."""
        name = PREFIX + uuid.uuid4().hex[:8]
        root = {'root': {'type': 'disk', 'path': '/',
                         'pool': self.conf.lxd.storage_pool}}
        self.client.create_container(
            name, {'user.nova_lxd_accel.instance_uuid': name}, root, [],
            source={'type': 'image', 'alias': self.args.image})
        return name, self.claims.claim(name, allocations, None)

    def remove(self, name):
        """Remove as the driver does; (seconds to verified, keys left)."""
        released = self.gate.note_destroy(
            lambda: self.client.get_container(name))
        self.client.remove_container(name)
        gone = time.monotonic()
        left = self.gate.verify_release(released)
        return time.monotonic() - gone, left

    def cleanup(self):
        for record in self.client.list_containers():
            if record['name'].startswith(PREFIX):
                self.client.remove_container(record['name'])
        self.gate.stop()


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


def wait_holding(process, timeout=60):
    """Whether the holder said it holds its memory."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if line.startswith('holding'):
            return True
        if not line and process.poll() is not None:
            return False
    return False


def apps_by_gpu(host):
    snapshot = host.gate.refresh()
    return {pci: [a.name for a in apps] for pci, apps in
            snapshot.apps.items()}


def run(args, report):
    work = tempfile.mkdtemp(prefix='gpu-acceptance-')
    # the container's root (a mapped uid) reads the holder from here
    os.chmod(work, 0o755)
    host = Host(args, make_conf(args, os.path.join(work, 'state')))
    try:
        checks(args, report, host, work)
    finally:
        host.cleanup()
        shutil.rmtree(work, ignore_errors=True)


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

    whole = [(rp, g) for rp, g in gpus if not g.mig_devices]
    migs = [(rp, g) for rp, g in gpus if g.mig_devices]
    if not migs:
        report.skip('MIG slice claim and release', 'no GPU is in MIG mode '
                    'here, and MIG changes are not allowed on a lent machine')
    binary = build_holder(work)
    if binary is None:
        report.skip('CUDA memory held from a container', 'no C compiler '
                    '(cc, gcc or nvcc) on this host')
    if not whole:
        report.skip('whole-GPU claim and release', 'every GPU is split into '
                    'MIG devices')
        return
    rp_uuid, gpu = whole[0]
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
    if binary is not None and started:
        holder = start_holder_in(host, name, binary, HOLD_MIB)
        held = wait_holding(holder)
        report.check(held, 'a CUDA program in the container holds %d MiB'
                     % HOLD_MIB, holder.stderr.read() if not held and
                     holder.poll() is not None else '')
        if held:
            apps = apps_by_gpu(host)
            report.check(
                'holder' in ' '.join(apps.get(pci, [])) and not any(
                    'holder' in ' '.join(v) for p, v in apps.items()
                    if p != pci),
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

    # 4. a process on the host keeps the unit reserved, named
    if binary is None:
        report.skip('a host process keeps a released GPU reserved',
                    'no CUDA program')
    else:
        name, _ = host.new_container(allocation)
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=gpu.nvidia_uuid or '')
        outside = subprocess.Popen([binary, str(HOLD_MIB)], env=env,
                                   stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        held = False
        try:
            held = wait_holding(outside)
            if held:
                _seconds, left = host.remove(name)
                why = host.gate.unavailable_units().get('pci:' + pci, [''])[0]
                report.check(bool(left) and 'holder' in why,
                             'a host process on %s keeps it reserved, '
                             'named: %s' % (pci, why), 'left: %s' % left)
                try:
                    host.claims.claim(PREFIX + 'refused', allocation, None)
                    report.check(False, 'the claim refuses the dirty GPU')
                except exception.AcceleratorUnavailable as exc:
                    report.check('not verified clean' in str(exc),
                                 'the claim refuses the dirty GPU', str(exc))
            else:
                report.skip('a host process keeps a released GPU reserved',
                            'the holder could not hold memory on the host: '
                            + outside.stderr.read())
                host.remove(name)
        finally:
            outside.kill()
            outside.wait()
        if held:
            left = host.gate.verify_release({'pci:' + pci})
            report.check(not left, 'the host process gone: %s clean again'
                         % pci, str(left))

    # 5. MPS quotas on a shared GPU
    if not shutil.which('nvidia-cuda-mps-control'):
        report.skip('MPS memory quota between two containers',
                    'no nvidia-cuda-mps-control on this host')
    elif binary is None:
        report.skip('MPS memory quota between two containers',
                    'no CUDA program')
    else:
        check_mps(args, report, work, gpu, binary)


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

    The GPU is shared in 2 slots (``shared_gpus``); each container gets the
    driver's MPS devices and environment for ``lxd:gpu_memory_mb`` =
    ``quota_mib``. The control daemon runs as the admin guide says: its
    pipe directory, and its /dev/shm bound on the shm directory in a mount
    namespace of its own.
    """
    pci = gpu.pci_address
    conf = make_conf(args, os.path.join(work, 'state-mps'))
    group = 'lxd_accelerators'
    conf.set_override('shared_gpus', ['%s:2' % pci], group=group)
    pipe = os.path.join(work, 'mps-pipe')
    shm = os.path.join(work, 'mps-shm')
    logs = os.path.join(work, 'mps-log')
    for directory in (pipe, shm, logs):
        os.makedirs(directory, mode=0o777, exist_ok=True)
        os.chmod(directory, 0o777)
    conf.set_override('mps_pipe_directory', pipe, group=group)
    conf.set_override('mps_shm_directory', shm, group=group)
    host = Host(args, conf)
    env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=pipe,
               CUDA_MPS_LOG_DIRECTORY=logs,
               CUDA_VISIBLE_DEVICES=gpu.nvidia_uuid or '0')
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
        outcomes = []
        for mib in (quota_mib * 2, quota_mib // 2):
            name = PREFIX + uuid.uuid4().hex[:8]
            root = {'root': {'type': 'disk', 'path': '/',
                             'pool': conf.lxd.storage_pool}}
            host.client.create_container(
                name, {'user.nova_lxd_accel.instance_uuid': name}, root, [],
                source={'type': 'image', 'alias': args.image})
            host.claims.claim(name, allocation, _Instance(quota_mib))
            host.client.change_state(name, 'start')
            holder = start_holder_in(host, name, binary, mib)
            outcomes.append((mib, wait_holding(holder), holder))
        (over, over_held, over_proc), (within, within_held, proc) = outcomes
        why = '' if over_held or over_proc.poll() is None else \
            over_proc.stderr.read()
        # refused by the allocation itself, not by a failure to start
        report.check(not over_held and 'cuMemAlloc' in why,
                     'MPS refuses %d MiB to a client with lxd:gpu_memory_mb '
                     '%d' % (over, quota_mib),
                     'it holds them' if over_held else why)
        report.check(within_held, 'MPS gives %d MiB to a client within its '
                     'quota' % within, proc.stderr.read()
                     if proc.poll() is not None else '')
    finally:
        host.cleanup()
        subprocess.run(['nvidia-cuda-mps-control'], input='quit\n',
                       text=True, env=env, check=False)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--lxc', default=os.environ.get('LXC', 'lxc'),
                        help='lxc or incus (the CLI for exec and mounts)')
    parser.add_argument('--endpoint', default=None,
                        help='[lxd] endpoint (default: discovered)')
    parser.add_argument('--image', default='tiny')
    parser.add_argument('--nvidia-smi', default='nvidia-smi')
    parser.add_argument('--release-wait', type=float, default=5.0)
    args = parser.parse_args(argv)
    report = Report()
    run(args, report)
    print('\ngpu-acceptance: %s' % ('all checks passed' if not report.failed
                                    else '%d check(s) failed'
                                    % report.failed))
    return min(report.failed, 100)


if __name__ == '__main__':
    sys.exit(main())
