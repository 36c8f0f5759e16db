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

"""Instance lifecycle across LXD objects: spawn, destroy, rescue, snapshot.

These steps touch more than one container or image, and each undoes its
own partial work when it fails, so a failed call leaves LXD as it was.
"""

import os
import typing

from nova.compute import power_state
from nova.compute import task_states
from nova.compute import vm_states
from nova import exception as nova_exception
from oslo_log import log as logging
from oslo_utils import excutils
from oslo_utils import timeutils

from nova_lxd_accel.accel.binding import claims
from nova_lxd_accel.accel import gate_seams
from nova_lxd_accel.container import builder
from nova_lxd_accel.container import identity
from nova_lxd_accel import daemon
from nova_lxd_accel import exception
from nova_lxd_accel.extra_specs import lxd_keys
from nova_lxd_accel.hostside import plumbing as lxd_plumbing
from nova_lxd_accel.instance import ephemeral as lxd_ephemeral
from nova_lxd_accel.instance import guest as lxd_guest
from nova_lxd_accel.instance import image_cache

LOG = logging.getLogger(__name__)

#: vm_states in which a missing container means "deleted behind nova's
#: back" (see Lifecycle.power_state)
_SETTLED_STATES = (vm_states.ACTIVE, vm_states.STOPPED, vm_states.PAUSED,
                   vm_states.SUSPENDED)


#: Pool drivers whose stopped instances' root file systems the host sees
#: (rescue shows them in the rescue container from that path): dir, and
#: btrfs, whose subvolumes stay mounted with the pool. zfs and lvm mount
#: an instance's volume only while it runs.
RESCUE_POOL_DRIVERS = ('dir', 'btrfs')


#: Words in LXD's answer that mark a failure of this host, not of the
#: request: another host may well succeed, so nova reschedules.
HOST_LOCAL_REASONS = (
    'no space left on device', 'disk quota exceeded',
    'device or resource busy', 'resource temporarily unavailable',
    'cannot allocate memory', 'too many open files',
    'is busy running',
    # LXD's first-start remap of an unprivileged container's files (dir
    # pools without idmapped mounts) failed once beside a snapshot (issue
    # 11 item 13, not reproduced): LXD's fault, not the request's; nova
    # retries the build with a fresh container.
    'failed to handle idmapped storage',
    # A host-side link (veth, tap) of the same name already exists here
    # (RTNETLINK "File exists"): a leftover of this host, not the request.
    'file exists',
    # An accelerator bound from this host's allocation that LXD cannot
    # find here: a GPU gone from this host, not a bad request.
    'failed to detect requested gpu device') + tuple(
        '"' + prefix for prefix in identity.ACCEL_DEVICE_PREFIXES)


#: Raised as they are: already decided, or nova's compute manager
#: aborts the build on them itself (ImageUnacceptable, InvalidInput).
_DECIDED = (nova_exception.BuildAbortException,
            nova_exception.RescheduledException,
            nova_exception.ImageUnacceptable, nova_exception.InvalidInput)

#: Failures of this host: nova reschedules them (they name the daemon).
_HOST_LOCAL = (nova_exception.VirtualInterfacePlugException,
               nova_exception.VirtualInterfaceCreateException,
               exception.LXDUnreachable, exception.LXDOperationTimeout,
               exception.AcceleratorUnavailable,
               exception.LXDPreconditionFailed,
               exception.LXDConcurrentUpdate)

#: Failures of the request: every host refuses it the same way.
_REQUEST_FAULTS = (nova_exception.Invalid, exception.FlavorNotAllowed,
                   exception.FlavorExtraSpecInvalid,
                   exception.AcceleratorNotBindable,
                   exception.EphemeralDiskRefused)


def build_failure(instance, exc):
    """The exception spawn raises for ``exc``: abort or reschedule.

    The one place that decides. Nova reschedules a build on any exception
    but ``BuildAbortException`` (and a few of its own), and the user then
    reads only "Exceeded maximum number of retries"; so:

    * a failure every host would meet the same way (LXD rejects the
      container's config or a device, the image is not an LXD image, the
      operator forbids the flavor, a bad extra spec) aborts the build,
      and the fault carries the reason;
    * a failure of this host (LXD unreachable or too slow, out of space,
      a device busy here, an image whose file LXD lost, Placement and this
      host disagreeing about accelerators) is raised as it is: nova turns
      it into a ``RescheduledException`` and tries another host; the last
      host's reason is in the fault.
    """
    if isinstance(exc, _DECIDED):
        return exc
    if isinstance(exc, _HOST_LOCAL):
        return exc
    if isinstance(exc, exception.LXDOperationFailed):
        reason = str(exc).lower()
        if any(word in reason for word in HOST_LOCAL_REASONS):
            return exc
        if image_cache.lost_its_file(exc):
            return exc
    elif not isinstance(exc, _REQUEST_FAULTS):
        return exc
    return nova_exception.BuildAbortException(
        instance_uuid=instance.uuid, reason=_message(exc))


def _message(exc):
    if isinstance(exc, nova_exception.NovaException):
        return exc.format_message()
    return str(exc)


def _is_interrupted_build(instance):
    """Whether it is (or was, if nova-compute died) being built."""
    return (instance.vm_state == vm_states.BUILDING or
            instance.task_state in (task_states.SPAWNING,
                                    task_states.REBUILD_SPAWNING))


def _has_root_volume(block_device_info):
    for bdm in (block_device_info or {}).get('block_device_mapping') or []:
        if bdm.get('boot_index') == 0:
            return True
    return False


class Lifecycle(object):
    """Spawn, destroy, rescue and snapshot of one host's containers.

    :param host: the host's :class:`.host.Host`, which makes each
        instance's :class:`.guest.Guest`.
    :param plumbing: the host's :class:`.plumbing.HostPlumbing` (None: no
        ports, no volumes).
    :param claims: the host's :class:`.claims.Claims` (None: a spawn
        with accelerators in its allocations is refused).
    :param gpu_gate: the host's GPU gate, as a removal sees it
        (:class:`.gate_seams.ReleaseGate`): told of every container removed
        so that its GPU units are verified at release, or None.
    """

    def __init__(self, client, conf, images, host, plumbing=None,
                 claims=None,
                 gpu_gate: typing.Optional[gate_seams.ReleaseGate] = None):
        self._client = client
        self._conf = conf
        self._images = images
        self._host = host
        self._plumbing = plumbing or lxd_plumbing.HostPlumbing()
        self._claims = claims
        self._gate = gpu_gate
        #: the instances' ephemeral disks (:mod:`.ephemeral`)
        self.ephemeral = lxd_ephemeral.EphemeralDisks(client, conf)

    def guest(self, instance):
        return self._host.guest(instance)

    def spawn(self, context, instance, image_meta, injected_files, policy,
              block_device_info=None, power_on=True, allocations=None,
              network_info=None):
        """Create (and start) the instance's container.

        :param allocations: nova's ``{rp_uuid: {'resources': {...}}}``; the
            accelerator units they name are bound to exact host devices
            (see :mod:`nova_lxd_accel.accel.binding.pick`).
        :param network_info: nova's network info: one NIC per port.
        """
        try:
            # Whatever microversion made the flavor: refuse bad lxd: extra
            # specs before anything is created.
            lxd_keys.check_flavor(instance.flavor, policy)
            self._spawn(context, instance, image_meta, injected_files,
                        policy, block_device_info, power_on, allocations,
                        network_info)
        except Exception as exc:
            failure = build_failure(instance, exc)
            if failure is exc:
                raise
            LOG.error('Build aborted, another host would fail the same '
                      'way: %s', _message(exc), instance=instance)
            raise failure from exc

    def _spawn(self, context, instance, image_meta, injected_files, policy,
               block_device_info, power_on, allocations, network_info):
        if _has_root_volume(block_device_info):
            raise exception.BootFromVolumeNotSupported(
                instance_uuid=instance.uuid)
        # Pure and cheap: refuse a bad flavor or port before touching LXD;
        # the container is built here once, its host's parts added below.
        container = builder.build_container(
            instance, instance.flavor, image_meta, policy,
            builders=builder.GUEST_PARTS)
        builder.host_fragment(instance, policy,
                              self._plumbing.planned(network_info))
        lxd_ephemeral.check_mappings(instance, block_device_info)
        alias = self._images.ensure(context, image_meta)
        guest = self.guest(instance)
        profiles = list(self._conf.lxd.profiles)
        try:
            # the volume the container mounts at /mnt, made first
            self.ephemeral.create(instance, instance.flavor)
            self._create_with_host_side(context, instance, guest,
                                        image_meta, policy, alias, profiles,
                                        allocations, network_info,
                                        block_device_info, container)
            # User data byte for byte, as cloud-init's NoCloud seed.
            guest.push_files(builder.cloud_init_seed(instance) +
                             list(injected_files or []))
            if power_on:
                self._plumbing.wait_for_plugged(instance, network_info,
                                                guest.start)
        except Exception:
            with excutils.save_and_reraise_exception():
                LOG.error('Spawn failed; removing the half-made container '
                          '%s', guest.name, instance=instance)
                self._release_gpus(guest.record, lambda: self._delete_quietly(
                    guest))
                self.ephemeral.delete_quietly(instance)
                self._plumbing.release(instance, network_info,
                                       block_device_info, quiet=True)
        LOG.info('Container %s created%s', guest.name,
                 ' and started' if power_on else '', instance=instance)

    def _create_with_host_side(self, context, instance, guest, image_meta,
                               policy, alias, profiles, allocations,
                               network_info, block_device_info, container):
        """Plug the host side (NICs, volumes), then create the container."""
        host_side = self._plumbing.connect(context, instance, network_info,
                                           block_device_info)
        container = builder.with_host_side(container, instance, policy,
                                           host_side)
        started = timeutils.utcnow()
        try:
            guest.create(container, alias, profiles)
        except exception.LXDOperationFailed as exc:
            if not image_cache.lost_its_file(exc):
                raise
            # A failed create leaves no container; once more, on the
            # image imported again.
            alias = self._images.replace_lost(context, image_meta, started)
            guest.create(container, alias, profiles)
        if self._claims is None:
            if claims.wants_accelerators(allocations):
                raise exception.AcceleratorNotBindable(
                    resource_class='accelerators', provider='-',
                    reason='this driver was set up without accelerators')
            return
        # Read who holds what, pick, and record the pick in the stopped
        # container, under one lock that covers nothing else; logins, cron
        # and services get the MPS client limits too
        self._claims.prepare(guest.name, allocations, instance)

    def _release_gpus(self, read_record, remove):
        """Run ``remove()``; verify the GPU units the container held.

        The units are marked dirty before and probed right after the
        container is gone (:mod:`.accel.health.gate`), so those found clean are
        offered again by nova's update that follows.

        :returns: what ``remove()`` returned.
        """
        if self._gate is None:
            return remove()
        released = self._gate.note_destroy(read_record)
        try:
            return remove()
        except Exception:
            # still there: a listing showing it is its instance holding
            # the units again, which the next probe takes off the list
            self._gate.removal_failed(released)
            raise
        finally:
            self._gate.verify_release(released)

    def remove_container(self, name):
        """Remove container ``name``, verifying its GPUs at release.

        :returns: whether it existed.
        """
        return self._release_gpus(
            lambda: self._client.get_container(name),
            lambda: self._client.remove_container(name))

    def _delete_quietly(self, guest):
        try:
            guest.delete()
        except exception.LXDAccelException as exc:
            LOG.error('Could not remove container %(name)s: %(exc)s; '
                      'remove it with `%(command)s`',
                      {'name': guest.name, 'exc': exc,
                       'command': daemon.cli_for(
                           self._client, 'delete', name=guest.name)},
                      instance=guest.instance)

    def destroy(self, instance):
        guest = self.guest(instance)
        try:
            deleted = self._release_gpus(guest.record, guest.delete)
        except exception.LXDUnreachable as exc:
            if not _is_interrupted_build(instance):
                raise
            # nova cleans up a build that failed here: if this raised,
            # nova would abort the build instead of trying another host.
            LOG.error('Cannot remove what the failed build may have left '
                      '(%(exc)s); nova tries another host. If LXD made '
                      'container %(name)s before it went away, remove it '
                      'once LXD is back: `lxc delete --force %(name)s '
                      '--project %(project)s`', {
                          'exc': exc.format_message(), 'name': guest.name,
                          'project': self._conf.lxd.project},
                      instance=instance)
            return
        if not deleted:
            LOG.warning('Container %s is already gone', guest.name,
                        instance=instance)
        self.ephemeral.delete(instance)

    # -- restart of nova-compute -----------------------------------------

    def remove_interrupted_builds(self, instances, host):
        """Remove the containers of builds a dead nova-compute left.

        nova-compute killed during a spawn leaves its instance BUILDING
        (or rebuilding) and perhaps a half-made container, holding its
        accelerators; at the restart nova sets such an instance to ERROR
        without a word. Its container is removed here (LXD operations on
        it are waited for or cancelled), and the returned exception says
        what happened, for the instance's fault.

        :param instances: nova's instances on this host.
        :returns: [(instance, SpawnInterrupted)] for each interrupted build.
        """
        interrupted = []
        for instance in instances:
            if not _is_interrupted_build(instance):
                continue
            guest = self.guest(instance)
            try:
                removed = self._release_gpus(guest.record, guest.delete)
            except exception.LXDAccelException as exc:
                LOG.error('Cannot remove the container of the interrupted '
                          'build: %s', exc, instance=instance)
                cleanup = ('could not remove its container %s (%s)' % (
                    guest.name, exc.format_message()))
            else:
                cleanup = ('removed the half-made container %s' % guest.name
                           if removed else 'found no container of it')
                self.ephemeral.delete_quietly(instance)
            LOG.warning('Build interrupted by the restart of nova-compute; '
                        '%s', cleanup, instance=instance)
            interrupted.append((instance, exception.SpawnInterrupted(
                host=host, cleanup=cleanup)))
        return interrupted

    # -- rescue -----------------------------------------------------------

    def _pool_mount(self, guest, pool_name, pool):
        """Where the daemon has pool ``pool_name`` mounted.

        :returns: (path, whether this process sees it): Incus mounts its
            pools in a mount namespace of its own, where the rescue
            container's disk device is resolved.
        """
        driver = pool.get('driver')
        if driver == 'dir':
            return pool['config']['source'], True
        if driver not in RESCUE_POOL_DRIVERS:
            raise exception.RescueFailed(
                instance_id=guest.instance.uuid,
                reason='rescue shows the root file system from a host '
                       'path; storage pool %s uses the %s driver, whose '
                       'volumes are not mounted while the instance is '
                       'stopped (rescue works on %s pools)' % (
                           pool_name, driver,
                           ' and '.join(RESCUE_POOL_DRIVERS)))
        # The daemon mounts the pool at <its directory>/storage-pools/<pool>:
        # its directory holds the loop file of a loop-backed pool
        # (<directory>/disks/<pool>.img), and the socket nova-compute uses.
        homes = []
        source = (pool.get('config') or {}).get('source') or ''
        if os.path.basename(os.path.dirname(source)) == 'disks':
            homes.append(os.path.dirname(os.path.dirname(source)))
        socket = self._client.endpoint or ''
        if socket.startswith('/'):
            homes.append(os.path.dirname(os.path.realpath(socket)))
        mounts = [os.path.join(home, 'storage-pools', pool_name)
                  for home in homes]
        for mount in mounts:
            if os.path.ismount(mount):
                return mount, True
        if not mounts:
            raise exception.RescueFailed(
                instance_id=guest.instance.uuid,
                reason='rescue on a %s pool needs the daemon on this host, '
                       'reached through its unix socket' % driver)
        # mounted in the daemon's own mount namespace: the daemon checks
        return mounts[0], False

    def _rootfs_path(self, guest, record):
        root = ((record.get('expanded_devices') or {}).get('root') or
                (record.get('devices') or {}).get('root') or {})
        pool_name = root.get('pool') or self._conf.lxd.storage_pool
        pool = self._client.storage_pool(pool_name)
        volume = guest.name
        if self._conf.lxd.project != 'default':
            volume = '%s_%s' % (self._conf.lxd.project, guest.name)
        mount, visible = self._pool_mount(guest, pool_name, pool)
        path = os.path.join(mount, 'containers', volume, 'rootfs')
        if visible and not os.path.isdir(path):
            raise exception.RescueFailed(
                instance_id=guest.instance.uuid,
                reason='root file system %s is not visible on this host'
                       % path)
        return path

    def rescue(self, context, instance, rescue_image_meta, policy):
        guest = self.guest(instance)
        record = guest.require_record()
        rootfs = self._rootfs_path(guest, record)
        alias = self._images.ensure(context, rescue_image_meta)
        container = builder.rescue_container(
            instance, rescue_image_meta, policy, guest.name, rootfs)
        was_running = record['status'] != 'Stopped'
        guest.stop(timeout=self._conf.shutdown_timeout)
        try:
            self._client.create_container(
                guest.rescue_name, container['config'],
                container['devices'], list(self._conf.lxd.profiles),
                source={'type': 'image', 'alias': alias})
            self._client.change_state(guest.rescue_name, 'start')
        except Exception:
            with excutils.save_and_reraise_exception():
                self._undo_rescue(guest, was_running)

    def _undo_rescue(self, guest, was_running):
        """Remove the rescue container; start the original again."""
        LOG.error('Rescue failed; removing %(rescue)s%(restart)s', {
            'rescue': guest.rescue_name,
            'restart': ' and starting the instance again' if was_running
            else ''}, instance=guest.instance)
        try:
            self._client.remove_container(guest.rescue_name)
        except exception.LXDAccelException as exc:
            LOG.error('Could not remove the rescue container: %s', exc,
                      instance=guest.instance)
        if was_running:
            try:
                guest.ensure_running()
            except exception.LXDAccelException as exc:
                LOG.error('Could not start the instance again after the '
                          'failed rescue (%s); start it with `openstack '
                          'server reboot --hard`', exc,
                          instance=guest.instance)

    def unrescue(self, instance):
        guest = self.guest(instance)
        self._client.remove_container(guest.rescue_name)
        guest.ensure_running()

    def power_state(self, instance, use_cache=False):
        """The instance's power state, for nova's ``get_info``.

        The rescue container's state wins while there is one. A container
        deleted on the daemon while nova had the server settled (no task
        running) is reported SHUTDOWN, not "not found": nova ignores
        NOSTATE, so the server would stay ACTIVE for good. With SHUTDOWN
        the lifecycle event (or nova's power sync) stops the server;
        ``server start`` then says that the container is gone.

        :param use_cache: answer from the last listing of the containers
            when it can (see :meth:`state_record`): nova's power-state sync
            lists them once (``get_num_instances``) and then asks for
            every instance.
        :raises: ContainerNotFound for an instance in a task (building,
            deleting, moving) whose container is missing.
        """
        record = self.state_record(instance, use_cache=use_cache)
        if record is not None:
            return lxd_guest.power_state_of(record)
        if getattr(instance, 'task_state', None) is None and getattr(
                instance, 'vm_state', None) in _SETTLED_STATES:
            LOG.warning('The container of this instance is gone from the '
                        'daemon (deleted outside of Nova): reported shut '
                        'down', instance=instance)
            return power_state.SHUTDOWN
        raise exception.ContainerNotFound(
            instance_id=instance.uuid, container=self.guest(instance).name)

    def rescue_record(self, instance):
        return self._client.get_container(self.guest(instance).rescue_name)

    def state_record(self, instance, use_cache=False):
        """The record the power state comes from, or None: no container.

        The rescue container's while there is one, else the container's.

        :param use_cache: from the client's last listing, without a
            request, when it is recent and this process changed neither
            container since it was asked
            (:meth:`.client.LXDClient.listed_containers`); read otherwise
            (two reads while nothing is rescued).
        """
        guest = self.guest(instance)
        if use_cache:
            listed = self._client.listed_containers(
                (guest.rescue_name, guest.name))
            if listed is not None:
                return listed[guest.rescue_name] or listed[guest.name]
        return self.rescue_record(instance) or guest.record()

    # -- snapshot ---------------------------------------------------------

    def snapshot(self, context, instance, image_id, update_task_state):
        guest = self.guest(instance)
        record = guest.require_record()
        image_cache.snapshot_to_glance(
            self._client, context, guest.name, image_id, update_task_state,
            properties=claims.snapshot_properties(
                record.get('config') or {}))
