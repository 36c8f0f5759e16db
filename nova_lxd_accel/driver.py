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

"""The Nova compute driver: a facade over the modules that do the work.

Each ComputeDriver method is a few lines delegating to one part, all built
once by :class:`nova_lxd_accel.parts.Parts`: ``host`` (the daemon's facts,
the container policy, the lifecycle watcher, the root provider),
``lifecycle`` (spawn, destroy, rescue, snapshot, power, console),
``migration`` (resize, cold migration), ``images`` (Glance <-> LXD),
``networking``, ``volumes`` and ``plumbing`` (the host side of an
instance), and the accelerators: ``inventory`` (what is reported to
Placement), ``claims`` (the one claim) and ``gate`` (GPU health and
release). The driver itself keeps no host state; only ``client`` talks to
LXD, and nova and Placement are asked through ``nova_lookups``.
"""

import nova.conf
from nova import objects
from nova.virt import driver
from nova.virt import hardware
from oslo_log import log as logging

from nova_lxd_accel.accel.binding import reconcile
from nova_lxd_accel import conf
from nova_lxd_accel.container import identity
from nova_lxd_accel import host as lxd_host
from nova_lxd_accel.hostside import network
from nova_lxd_accel.hostside import volumes
from nova_lxd_accel.instance import image_cache
from nova_lxd_accel.instance import migration
from nova_lxd_accel import nova_lookups
from nova_lxd_accel import parts

LOG = logging.getLogger(__name__)
CONF = nova.conf.CONF


class LXDDriver(driver.ComputeDriver):
    """Runs Nova instances as LXD containers."""

    capabilities = dict(
        driver.ComputeDriver.capabilities,
        # Glance images for this driver are LXD tarballs stored as raw.
        supports_image_type_raw=True,
        # Imported images are kept in LXD and pruned by manage_image_cache.
        has_imagecache=True,
        **network.CAPABILITIES, **volumes.CAPABILITIES,
        **migration.CAPABILITIES)

    def __init__(self, virtapi, read_only=False):
        super(LXDDriver, self).__init__(virtapi)
        conf.register_opts(CONF)
        self.capabilities = dict(
            self.capabilities, supports_migrate_to_same_host=(
                CONF.lxd_migration.same_host))
        # nova-compute passes CONF.host to init_host; built again there if
        # it passes another name
        self._parts = parts.Parts.build(CONF, virtapi, CONF.host)

    @property
    def _nodename(self):
        return self._parts.owner.host

    # -- host -------------------------------------------------------------

    def init_host(self, host):
        if host != self._nodename:
            self._parts = parts.Parts.build(CONF, self.virtapi, host,
                                            client=self._parts.client)
        self._parts.host.check()
        image_cache.clean_download_dir(CONF)
        instances = self._instances_on(host)
        self._remove_interrupted_builds(host, instances)
        self._reconcile_accelerators(host, instances)
        self._parts.host.start_watcher(self.emit_event)

    @staticmethod
    def _instances_on(host):
        """nova's instances on ``host``, or None when nova cannot say."""
        try:
            return nova_lookups.host_instances(host)
        except Exception as exc:
            LOG.warning('Cannot list the instances nova has on %(host)s '
                        '(%(exc)s): containers of builds interrupted by a '
                        'restart are not removed and accelerator bindings '
                        'of deleted instances not released this time',
                        {'host': host, 'exc': exc})
            return None

    def _remove_interrupted_builds(self, host, instances):
        # Before the accelerator check: their containers hold devices.
        if instances is None:
            return
        for instance, fault in self._parts.lifecycle.remove_interrupted_builds(
                instances, host):
            try:
                nova_lookups.record_fault(instance, fault)
            except Exception:
                LOG.exception('Cannot record the fault of the interrupted '
                              'build', instance=instance)

    def _reconcile_accelerators(self, host, instances):
        # LXD's container configs say who holds which device; compare them
        # with nova and Placement after a restart (accel.binding.reconcile).
        uuids = None if instances is None else {i.uuid for i in instances}
        try:
            reconcile.reconcile(
                self._parts.client, host, uuids,
                nova_lookups.placement_allocations,
                on_release=self._parts.gate.note_destroy)
        except Exception:
            LOG.exception('Checking the accelerator bindings of the '
                          'containers of %s failed', host)

    def cleanup_host(self, host):
        self._parts.gate.stop()
        self._parts.host.stop_watcher()

    def _policy(self):
        return self._parts.host.policy()

    def get_available_nodes(self, refresh=False):
        return [self._nodename]

    def node_is_available(self, nodename):
        return nodename == self._nodename

    def get_available_resource(self, nodename):
        # outside nova's resource tracker lock: probe the GPUs here
        self._parts.gate.maybe_refresh()
        # and read the host for update_provider_tree, which runs under
        # that lock (for every instance claim too) and reads nothing
        snapshot = self._parts.inventory.refresh()
        return self._parts.host.read_resource(snapshot.resources)

    def update_provider_tree(self, provider_tree, nodename, allocations=None):
        # Under nova's resource tracker lock: no read of the host here,
        # only what get_available_resource read last (the inventory's
        # reporter.Snapshot, the gate's last probe).
        inventory, gpu_gate = self._parts.inventory, self._parts.gate
        snapshot = inventory.snapshot()
        self._parts.host.update_root_provider(
            provider_tree, snapshot.resources,
            self._get_reserved_host_disk_gb_from_config(),
            self._get_allocation_ratios)
        desired = inventory.desired_from(nodename, snapshot,
                                         gpu_gate.probed_gpus())
        # held, unhealthy and not yet verified units reserved
        inventory.write_tree(provider_tree, nodename, gpu_gate.apply(desired),
                             allocations, snapshot.records)

    def get_host_ip_addr(self):
        return CONF.my_ip

    def get_host_uptime(self):
        return lxd_host.uptime()

    # -- volumes ----------------------------------------------------------

    def get_volume_connector(self, instance):
        return self._parts.volumes.connector(instance)

    def attach_volume(self, context, connection_info, instance, mountpoint,
                      disk_bus=None, device_type=None, encryption=None):
        self._parts.volumes.attach(context, connection_info, instance,
                                   mountpoint, disk_bus, device_type,
                                   encryption)

    def detach_volume(self, context, connection_info, instance, mountpoint,
                      encryption=None):
        self._parts.volumes.detach(context, connection_info, instance,
                                   mountpoint, encryption)

    # -- networking -------------------------------------------------------

    def plug_vifs(self, instance, network_info):
        self._parts.networking.plug_vifs(instance, network_info)

    def unplug_vifs(self, instance, network_info):
        self._parts.networking.unplug_vifs(instance, network_info)

    def attach_interface(self, context, instance, image_meta, vif):
        self._parts.networking.attach_interface(instance, vif)

    def detach_interface(self, context, instance, vif):
        self._parts.networking.detach_interface(instance, vif)

    # -- resize and migration ---------------------------------------------

    def migrate_disk_and_power_off(self, context, instance, dest, flavor,
                                   network_info, block_device_info=None,
                                   timeout=0, retry_interval=0):
        return self._parts.migration.migrate_disk_and_power_off(
            context, instance, dest, flavor, network_info,
            block_device_info, timeout, retry_interval)

    def finish_migration(self, context, migration, instance, disk_info,
                         network_info, image_meta, resize_instance,
                         allocations, block_device_info=None, power_on=True,
                         share_info=None):
        self._parts.migration.finish_migration(
            context, migration, instance, disk_info, network_info,
            image_meta, resize_instance, allocations, block_device_info,
            power_on)

    def delete_instance_files(self, instance):
        # nova calls this on the source of a failed migration once the
        # server is deleted: its kept original container is all there is.
        return self._parts.migration.delete_kept_original(instance)

    def confirm_migration(self, context, migration, instance, network_info):
        self._parts.migration.confirm_migration(context, migration, instance,
                                                network_info)

    def finish_revert_migration(self, context, instance, network_info,
                                migration, block_device_info=None,
                                power_on=True, share_info=None):
        self._parts.migration.finish_revert_migration(
            context, instance, network_info, migration, block_device_info,
            power_on)

    # Live migration is not supported (see nova_lxd_accel.instance.migration):
    # refuse it in the pre-checks, so nova leaves the server where it is.

    def check_can_live_migrate_destination(self, context, instance,
                                           src_compute_info, dst_compute_info,
                                           block_migration=False,
                                           disk_over_commit=False):
        raise migration.refuse_live_migration()

    def check_can_live_migrate_source(self, context, instance,
                                      dest_check_data, block_device_info=None):
        raise migration.refuse_live_migration()

    # -- inventory of instances -------------------------------------------

    def list_instances(self):
        records = self._parts.client.list_containers()
        return [record['name']
                for record in self._parts.owner.instances(records)]

    def list_instance_uuids(self):
        return self._parts.owner.instance_uuids(
            self._parts.client.list_containers())

    def get_num_instances(self):
        # One listing of the containers, with their status: nova's
        # power-state sync calls this, then get_info for every instance,
        # which the listing answers (Lifecycle.state_record).
        return len(self.list_instances())

    def instance_exists(self, instance):
        return self._parts.host.guest(instance).record() is not None

    def get_info(self, instance, use_cache=True):
        # use_cache=False (nova's _get_power_state, around its actions)
        # always reads the daemon
        return hardware.InstanceInfo(
            state=self._parts.lifecycle.power_state(
                instance, use_cache=use_cache))

    # -- lifecycle --------------------------------------------------------

    def spawn(self, context, instance, image_meta, injected_files,
              admin_password, allocations, network_info=None,
              block_device_info=None, power_on=True, accel_info=None):
        self._parts.lifecycle.spawn(
            context, instance, image_meta, injected_files, self._policy(),
            block_device_info, power_on, allocations=allocations,
            network_info=network_info)

    def destroy(self, context, instance, network_info, block_device_info=None,
                destroy_disks=True, destroy_secrets=True):
        # its GPUs are verified clean at release (accel.health.gate)
        self._parts.lifecycle.destroy(instance)
        # Like libvirt's cleanup: a failed unplug is logged, never blocks
        # the deletion.
        self._parts.networking.unplug_vifs(
            instance, network_info, ignore_errors=True)
        self._parts.volumes.disconnect_all(instance, block_device_info)

    def cleanup(self, context, instance, network_info, block_device_info=None,
                destroy_disks=True, migrate_data=None, destroy_vifs=True,
                destroy_secrets=True):
        # destroy() already removed everything this driver made.
        pass

    def reboot(self, context, instance, network_info, reboot_type,
               block_device_info=None, bad_volumes_callback=None,
               accel_info=None, share_info=None):
        if reboot_type == 'HARD':
            # A hard reboot also repairs the host side of the NICs.
            self._parts.networking.plug_vifs(instance, network_info)
        self._parts.host.guest(instance).reboot(
            hard=reboot_type == 'HARD')

    def power_off(self, instance, timeout=0, retry_interval=0):
        guest = self._parts.host.guest(instance)
        # The next start empties LXD's console buffer (see Guest).
        guest.keep_console()
        guest.stop(timeout, retry_interval)

    def power_on(self, context, instance, network_info,
                 block_device_info=None, accel_info=None, share_info=None):
        # After a host reboot the per-port bridges are gone; LXD cannot
        # start a NIC whose parent is missing.
        self._parts.networking.plug_vifs(instance, network_info)
        self._parts.host.guest(instance).ensure_running()

    def pause(self, instance):
        self._parts.host.guest(instance).pause()

    def unpause(self, instance):
        self._parts.host.guest(instance).unpause()

    def suspend(self, context, instance):
        self._parts.host.guest(instance).suspend()

    def resume(self, context, instance, network_info, block_device_info=None,
               share_info=None):
        self._parts.host.guest(instance).resume()

    def resume_state_on_host_boot(self, context, instance, network_info,
                                  share_info, block_device_info=None):
        self._parts.networking.plug_vifs(instance, network_info)
        self._parts.host.guest(instance).ensure_running()

    def get_diagnostics(self, instance):
        """State, limits and the accelerators bound into the container.

        This is the free-form diagnostics of API microversions < 2.48; the
        bound devices appear as ``<device name>: <what it is>``, e.g.
        ``nova-gpu0: pgpu pci=0000:07:00.0 (PGPU of resource provider
        ...)``; the 2.48+ format (get_instance_diagnostics) has no field for
        devices.
        """
        record = self._parts.host.guest(instance).require_record()
        config = record.get('config') or {}
        out = {'state': record.get('status'),
               'limits.cpu': config.get('limits.cpu'),
               'limits.memory': config.get('limits.memory')}
        for unit in identity.recorded_units(config):
            what = ' '.join('%s=%s' % (k, unit[k]) for k in (
                'pci', 'mig_uuid', 'mig_profile', 'netdev', 'vf_pci')
                if unit.get(k))
            out[unit.get('name')] = '%s %s (%s of resource provider %s)' % (
                unit.get('kind'), what, unit.get('resource_class'),
                unit.get('provider'))
        return out

    def get_instance_diagnostics(self, instance):
        """API microversion 2.48+ diagnostics (see Guest.diagnostics)."""
        return self._parts.host.guest(instance).diagnostics()

    def get_console_output(self, context, instance):
        return self._parts.host.guest(instance).console_tail(
            CONF.lxd.console_log_max_bytes)

    def manage_image_cache(self, context, all_instances):
        if not CONF.image_cache.remove_unused_base_images:
            return
        self._parts.images.prune(
            {instance.image_ref for instance in all_instances},
            CONF.image_cache.remove_unused_original_minimum_age_seconds)

    def cache_image(self, context, image_id):
        image_meta = objects.ImageMeta.from_image_ref(
            context, self._parts.images.image_api, image_id)
        return self._parts.images.cache(context, image_meta)

    def snapshot(self, context, instance, image_id, update_task_state):
        self._parts.lifecycle.snapshot(context, instance, image_id,
                                       update_task_state)

    def rescue(self, context, instance, network_info, image_meta,
               rescue_password, block_device_info, share_info):
        self._parts.lifecycle.rescue(
            context, instance, image_meta, self._policy())

    def unrescue(self, context, instance):
        self._parts.lifecycle.unrescue(instance)

    def power_update_event(self, instance, target_power_state):
        # Ironic-only hook; containers report their own power state.
        raise NotImplementedError()
