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

"""Resize and cold migration of containers, on one host or between two.

One model serves both: until the user confirms or reverts, the source host
keeps the instance's original container, stopped, under another name
(``nova-resize-<uuid>``, :meth:`.container.identity.Owner.backup_name`),
exactly as it was (config, devices, root file system; on the same host
without its NICs, whose MACs the working container uses); the destination
has the working container under the usual name.

* ``migrate_disk_and_power_off`` (source): check the new flavor fits,
  stop the container, then

  - same host: copy it (LXD local copy) to the backup name;
  - other host: send it to the destination's LXD with LXD's instance
    migration API (the destination daemon pulls it over HTTPS from this
    daemon, see :mod:`nova_lxd_accel.conf.lxd_migration`), then rename the
    source container to the backup name.

  The backup carries :data:`.identity.KEY_BACKUP_OF` instead of the host
  key, so the driver does not list it as an instance, while its accelerator
  devices still count as held (Placement still holds the old flavor's
  allocation for the migration); then the NICs are unplugged and the volumes
  disconnected, as the libvirt driver does.
* ``finish_migration`` (destination): the new flavor's limits, the NICs
  and volumes of this host, this host's ``[lxd] profiles`` with the masks
  of their unsafe content (never the source's: the container is sent
  without profiles, and its old masks are dropped), and accelerators bound
  afresh from the destination's allocation (never the source's devices:
  the hosts' devices differ), then start.
* ``confirm_migration`` (source): delete the backup, which releases the
  devices it held, and (another host) the ephemeral disk it sent.
* ``finish_revert_migration`` (source, after nova destroyed the
  destination's container): rename the backup back, restoring limits and
  devices exactly, re-plug and start.

Live migration is not supported (:func:`refuse_live_migration`).
"""

import copy
import json

from nova import exception as nova_exception
from nova import objects
from oslo_log import log as logging
from oslo_utils import excutils

from nova_lxd_accel.accel.binding import mps_environment
from nova_lxd_accel.container import builder
from nova_lxd_accel.container import identity
from nova_lxd_accel.container import records
from nova_lxd_accel import daemon as lxd_daemon
from nova_lxd_accel import exception

LOG = logging.getLogger(__name__)

#: ComputeDriver capabilities this module provides (merged by the driver).
CAPABILITIES = {
    'supports_migrate_to_same_host': True,
    # Evacuate rebuilds from the image on the new host (spawn); the old
    # host deletes the container at its restart (destroy), releasing its
    # devices. Root file systems are not shared between hosts.
    'supports_evacuate': True,
}

LIVE_MIGRATION_REFUSED = (
    'nova-lxd-accel cannot live-migrate containers: LXD moves a running '
    'container only with CRIU, which cannot checkpoint GPU, MIG or '
    'InfiniBand devices. Use cold migration (openstack server migrate) or '
    'resize instead.')


def refuse_live_migration():
    """The error for every live-migration pre-check of this driver.

    nova's conductor turns MigrationPreCheckError into a failed migration
    and leaves the instance ACTIVE where it is.
    """
    return nova_exception.MigrationPreCheckError(
        reason=LIVE_MIGRATION_REFUSED)


class Migration(object):

    """Resize and cold migration of one host's containers.

    The host's parts it uses: ``owner`` (names), ``lifecycle`` (containers
    are removed through it, so their GPUs are verified at release; and
    its ephemeral disks), ``claims``, ``plumbing`` and ``host`` (the policy
    containers are built under).
    """

    def __init__(self, client, conf, owner, lifecycle, claims, plumbing,
                 host):
        self._client = client
        self._conf = conf
        self._owner = owner
        self._host = host
        self._lifecycle = lifecycle
        self._claims = claims
        self._plumbing = plumbing

    # -- helpers ----------------------------------------------------------

    def _names(self, instance):
        return (self._owner.container_name(instance.uuid),
                self._owner.backup_name(instance.uuid))

    @staticmethod
    def _migration_of(context, instance):
        return objects.Migration.get_by_id_and_instance(
            context, instance.migration_context.migration_id, instance.uuid)

    def _fragment(self, instance, flavor, image_meta):
        return builder.resize_fragment(instance, flavor, image_meta,
                                       self._host.policy())

    def _host_devices(self, context, instance, network_info,
                      block_device_info, plug_ports=True):
        """This host's NICs and volumes, made here (builder.HOST_PARTS)."""
        host_side = self._plumbing.connect(context, instance, network_info,
                                           block_device_info, plug_ports)
        return builder.host_fragment(instance, self._host.policy(),
                                     host_side)['devices']

    def _rewrite(self, name, make, instance=None, profiles=None):
        """Replace a container's whole config and devices.

        :param make: callable(current config, current devices) ->
            (config, devices) to write; it may be called again after a
            concurrent change.
        :param instance: whose container it is: a missing one raises
            ContainerNotFound (else LXDObjectNotFound).
        :param profiles: the profiles it gets instead of its own, if given.

        A read-modify-write with the container's ETag, as every change to
        an instance (:meth:`nova_lxd_accel.client.LXDClient.
        modify_container`): a writer that changed the container meanwhile
        is not overwritten unseen.
        """
        def rewrite(config, devices):
            new_config, new_devices = make(dict(config), dict(devices))
            config.clear()
            config.update(copy.deepcopy(new_config))
            devices.clear()
            devices.update(copy.deepcopy(new_devices))

        if self._client.modify_container(name, rewrite,
                                         profiles=profiles) is None:
            if instance is not None:
                raise exception.ContainerNotFound(
                    instance_id=instance.uuid, container=name)
            raise exception.LXDObjectNotFound(
                action='update', target='instance %s' % name,
                reason='it is gone')

    def _destination(self, migration, dest_ip):
        conf = self._conf.lxd_migration
        host = migration.dest_compute
        endpoint = conf.endpoints.get(host) or conf.endpoint_template.format(
            host=host, ip=dest_ip)
        if not conf.client_cert or not conf.client_key:
            raise exception.MigrationFailed(
                instance_id=migration.instance_uuid, dest=host,
                reason='[lxd_migration] client_cert and client_key are not '
                       'set: this host has no certificate to present to '
                       'the daemon of %s (%s); make one and trust it there '
                       'with `%s`' % (host, endpoint, lxd_daemon.cli_for(
                           self._client, 'trust_add', file='<that file>')))
        remote = self._client.remote(
            endpoint, conf.client_cert, conf.client_key,
            conf.server_certs.get(host) or conf.verify)
        info = remote.server_info()
        auth = info.get('auth')
        if auth != 'trusted':
            daemon = lxd_daemon.DaemonInfo.from_server_info(info)
            raise exception.MigrationFailed(
                instance_id=migration.instance_uuid, dest=host,
                reason='the %s at %s does not trust %s (auth: %s); run '
                       '`%s` on %s' % (
                           daemon.name, endpoint, conf.client_cert, auth,
                           daemon.cli('trust_add', file='<that file>'),
                           host))
        return remote

    def _source_address(self, migration):
        address = self._conf.lxd_migration.source_address
        if address:
            return address
        info = self._client.server_info()
        addresses = (info.get('environment') or {}).get('addresses') or []
        if not addresses:
            raise exception.MigrationFailed(
                instance_id=migration.instance_uuid,
                dest=migration.dest_compute,
                reason='the LXD of this host does not listen on HTTPS, so '
                       'no other daemon can pull from it: set its '
                       'core.https_address (or [lxd_migration] '
                       'source_address)')
        return addresses[0]

    # -- source: migrate_disk_and_power_off -------------------------------

    def migrate_disk_and_power_off(self, context, instance, dest, flavor,
                                   network_info, block_device_info=None,
                                   timeout=0, retry_interval=0):
        migration = self._migration_of(context, instance)
        source_host = migration.source_compute
        same_host = source_host == migration.dest_compute
        name, backup = self._names(instance)
        guest = self._lifecycle.guest(instance)
        record = guest.require_record()
        try:
            # Refuse a flavor the container cannot take while it still
            # runs: nova then leaves the instance as it was.
            self._fragment(instance, flavor, None)
            self._lifecycle.ephemeral.check_resize(instance, flavor)
            if flavor.root_gb and flavor.root_gb < instance.flavor.root_gb:
                raise nova_exception.ResizeError(
                    reason='the root disk cannot shrink (%d GiB to %d GiB)'
                           % (instance.flavor.root_gb, flavor.root_gb))
        except Exception as exc:
            raise nova_exception.InstanceFaultRollback(inner_exception=exc)

        was_running = record['status'] != 'Stopped'
        guest.stop(timeout, retry_interval)
        if self._client.get_container(backup) is not None:
            # A failed earlier attempt; this container is the original.
            LOG.warning('Removing container %s left by an earlier resize',
                        backup, instance=instance)
            self._lifecycle.remove_container(backup)
        record = guest.require_record()
        try:
            if same_host:
                self._client.copy_container(name, backup,
                                            record.get('profiles') or [])
            else:
                self._send(context, instance, migration, dest, record)
                self._client.rename_container(name, backup)
            # Write the whole config and devices: LXD keeps it exactly as it
            # was (ETag-guarded, see _rewrite), but on
            # the same host without its NICs: LXD refuses to start a
            # bridged NIC whose MAC another instance of the project has on
            # the same parent, even a stopped one. finish_revert_migration
            # adds them again from network_info.
            devices = dict(record.get('devices') or {})
            if same_host:
                devices = {key: device for key, device in devices.items()
                           if device.get('type') != 'nic'}
            self._rewrite(backup, lambda current, _devices: (
                records.with_volatile(records.backup_config(
                    record['config'], source_host), current), devices))
        except Exception as exc:
            LOG.error('Moving the container to %(dest)s failed: %(exc)s; '
                      'the instance stays here', {
                          'dest': migration.dest_compute, 'exc': exc},
                      instance=instance)
            self._undo_park(instance, name, backup, record, was_running)
            raise nova_exception.InstanceFaultRollback(inner_exception=exc)
        self._plumbing.release(instance, network_info, block_device_info)
        LOG.info('Container %(name)s kept as %(backup)s until the %(what)s '
                 'is confirmed or reverted', {
                     'name': name, 'backup': backup,
                     'what': 'resize' if same_host else 'migration'},
                 instance=instance)
        return json.dumps({'source_host': source_host, 'backup': backup,
                           'same_host': same_host,
                           'was_running': was_running})

    def _undo_park(self, instance, name, backup, record, was_running):
        try:
            if self._client.get_container(name) is None and \
                    self._client.get_container(backup) is not None:
                self._client.rename_container(backup, name)
                self._rewrite(name, lambda current, _devices: (
                    record.get('config') or {}, record.get('devices') or {}))
            elif self._client.get_container(backup) is not None:
                self._client.delete_container(backup)
            if was_running:
                self._client.change_state(name, 'start')
        except Exception:
            LOG.exception('Could not restore container %s after the '
                          'failed move', name, instance=instance)

    def _send(self, context, instance, migration, dest_ip, record):
        """Send the stopped container to the destination's LXD."""
        name = record['name']
        remote = self._destination(migration, dest_ip)
        stale = remote.get_container(name)
        if stale is not None:
            uuid = identity.instance_uuid(stale)
            if uuid != instance.uuid:
                raise exception.MigrationFailed(
                    instance_id=instance.uuid, dest=migration.dest_compute,
                    reason='the destination has another container named %s'
                           % name)
            LOG.warning('Removing a stale copy of %(name)s from %(dest)s',
                        {'name': name, 'dest': migration.dest_compute},
                        instance=instance)
            remote.stop_now(name, stale)
            remote.delete_container(name)
        address = self._source_address(migration)
        certificate = self._client.server_info()['environment'][
            'certificate']
        timeout = self._conf.lxd_migration.timeout
        # the ephemeral disk first: the container's device names it
        volume_sent = self._lifecycle.ephemeral.send(
            instance, record, remote, address, certificate, timeout=timeout)
        operation_id, secrets = self._client.offer_migration(name)
        url = 'https://%s/1.0/operations/%s' % (address, operation_id)
        try:
            remote.create_from_migration(
                name, records.transfer_record(record,
                                              migration.dest_compute),
                url, certificate, secrets, timeout=timeout)
            self._client.wait_operation(operation_id, 'migrate',
                                        'instance %s' % name,
                                        timeout=timeout)
        except Exception:
            with excutils.save_and_reraise_exception():
                self._client.cancel_operation(operation_id)
                if volume_sent:
                    self._lifecycle.ephemeral.delete_remote_quietly(
                        instance, record, remote)
                try:
                    if remote.get_container(name) is not None:
                        remote.delete_container(name)
                except Exception:
                    LOG.exception('Could not remove the partial copy of '
                                  '%(name)s from %(dest)s', {
                                      'name': name,
                                      'dest': migration.dest_compute})
        LOG.info('Container %(name)s sent to %(dest)s (%(url)s)', {
            'name': name, 'dest': migration.dest_compute,
            'url': remote.endpoint}, instance=instance)

    # -- destination: finish_migration ------------------------------------

    def finish_migration(self, context, migration, instance, disk_info,
                         network_info, image_meta, resize_instance,
                         allocations, block_device_info=None, power_on=True):
        host = migration.dest_compute
        guest = self._lifecycle.guest(instance)
        record = guest.require_record()
        try:
            self._finish(context, instance, guest, record, host,
                         network_info, image_meta, allocations,
                         block_device_info, power_on)
        except Exception:
            with excutils.save_and_reraise_exception():
                self._undo_finish(context, instance, guest, migration,
                                  network_info, block_device_info)

    def _undo_finish(self, context, instance, guest, migration,
                     network_info, block_device_info):
        """Remove the half-made destination; the source stays as it was.

        The original is the source's kept container (the backup), so
        removing this container (and with it its accelerator binding) and
        the NICs and volumes plugged here loses nothing. On the same host
        the original is then put back in place, stopped, as it was before
        the resize (nova sets the instance's flavor back to the old one);
        on another host it stays on the source as the backup, which the
        source removes once the server is deleted
        (:meth:`delete_kept_original`).
        """
        _name, backup = self._names(instance)
        same_host = migration.source_compute == migration.dest_compute
        if same_host:
            where = 'is put back in place, stopped'
        else:
            where = 'stays on %s as %s' % (migration.source_compute, backup)
        LOG.error('Finishing the %(what)s failed: removing the half-made '
                  'container %(name)s; the original %(where)s', {
                      'what': 'resize' if same_host else 'migration',
                      'name': guest.name, 'where': where},
                  instance=instance)
        try:
            self._lifecycle.remove_container(guest.name)
            self._plumbing.release(instance, network_info,
                                   block_device_info)
            if same_host:
                record = self._client.get_container(backup)
                if record is not None:
                    self._client.rename_container(backup, guest.name)
                    self._restore(context, instance,
                                  dict(record, name=guest.name),
                                  migration.source_compute, network_info,
                                  block_device_info)
        except Exception:
            LOG.exception('Undoing the failed resize or migration failed; '
                          'the original is container %s', backup,
                          instance=instance)

    def delete_kept_original(self, instance):
        """Remove the kept original of a deleted instance (a failed move).

        :returns: whether nothing of the instance is left here.
        """
        _name, backup = self._names(instance)
        if self._lifecycle.remove_container(backup):
            LOG.info('Removed %s, kept for a migration that failed',
                     backup, instance=instance)
        self._lifecycle.ephemeral.delete_quietly(instance)
        return True

    def _finish(self, context, instance, guest, record, host, network_info,
                image_meta, allocations, block_device_info, power_on):
        fragment = self._fragment(instance, instance.flavor, image_meta)
        # a larger ephemeral disk (a smaller one was refused at the source)
        self._lifecycle.ephemeral.grow(instance, instance.flavor)
        host_devices = self._host_devices(context, instance, network_info,
                                          block_device_info)
        with self._claims.rewriting(guest.name, allocations,
                                    instance) as bound:
            # under the claim's lock: the new config with the units picked,
            # a read-modify-write with the container's ETag; this host's
            # [lxd] profiles (the fragment masks their unsafe content),
            # whatever the container was given where it comes from
            self._rewrite(guest.name, lambda config, devices: records.resized(
                dict(record, config=config, devices=devices), fragment, host,
                host_devices, bound), instance,
                profiles=list(self._conf.lxd.profiles))
        # written (or, the quota gone, removed) before the start
        mps_environment.reapply(self._client, guest.name, bound.config,
                                record.get('config'), instance)
        if power_on:
            guest.start()
        LOG.info('Container %(name)s now has flavor %(flavor)s on %(host)s',
                 {'name': guest.name, 'flavor': instance.flavor.name,
                  'host': host}, instance=instance)

    # -- source: confirm / revert -----------------------------------------

    def confirm_migration(self, context, migration, instance, network_info):
        _name, backup = self._names(instance)
        removed = self._lifecycle.remove_container(backup)
        LOG.info('Deleted container %s kept for a revert' if removed else
                 'Container %s is already gone', backup, instance=instance)
        if migration.source_compute != migration.dest_compute:
            # the destination has its own copy of the ephemeral disk
            self._lifecycle.ephemeral.delete_quietly(instance)

    def finish_revert_migration(self, context, instance, network_info,
                                migration, block_device_info=None,
                                power_on=True):
        name, backup = self._names(instance)
        host = migration.source_compute
        record = self._client.get_container(backup)
        if record is None:
            if self._client.get_container(name) is None:
                raise exception.ResizeBackupMissing(instance_id=instance.uuid,
                                                    container=backup)
            current = self._client.get_container(name)
            if identity.KEY_BACKUP_OF in (current.get('config') or {}):
                # An earlier revert renamed the backup and stopped before
                # restoring its config: finish that restore.
                self._restore(context, instance, current, host,
                              network_info, block_device_info)
            else:
                # Nothing was moved yet (nova recovering an interrupted
                # resize), or already reverted: the original is in place.
                LOG.info('Container %s was not moved or is already '
                         'restored; keeping it', name, instance=instance)
        else:
            # Same host, nova has not destroyed the resized copy (it does
            # in revert_resize): it is not the instance any more.
            self._lifecycle.remove_container(name)
            self._client.rename_container(backup, name)
            self._restore(context, instance, dict(record, name=name), host,
                          network_info, block_device_info)
        self._plumbing.plug_ports(instance, network_info)
        if power_on:
            self._lifecycle.guest(instance).ensure_running()
        LOG.info('Container %s restored as it was before the resize or '
                 'migration', name, instance=instance)

    def _restore(self, context, instance, record, host, network_info,
                 block_device_info):
        """The kept original's config and this host's NICs and volumes."""
        devices = {k: v for k, v in record['devices'].items()
                   if not records.is_host_side_device(k, v)}
        devices.update(self._host_devices(
            context, instance, network_info, block_device_info,
            plug_ports=False))
        self._rewrite(record['name'], lambda current, _devices: (
            records.restored_config(record['config'], host), devices))
