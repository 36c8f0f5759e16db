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

"""Per-instance operations: one container's life, through the LXD seam."""

import threading
import time

from nova.compute import power_state
from nova import exception as nova_exception
from nova.objects import diagnostics as diagnostics_obj
from oslo_log import log as logging
from oslo_utils import timeutils

from nova_lxd_accel.container import identity
from nova_lxd_accel import exception

LOG = logging.getLogger(__name__)

# LXD status -> nova power state. Transitional states report NOSTATE so
# nova's power-state sync waits instead of acting on a half-done change.
_POWER_STATES = {
    'Running': power_state.RUNNING,
    'Stopped': power_state.SHUTDOWN,
    'Frozen': power_state.PAUSED,
    'Error': power_state.CRASHED,
}


#: What nova read of each container's console, by container name.
#: LXD 5.0 keeps a running container's console in liblxc's ring buffer,
#: and every read of it through the API *consumes* what it returns: the
#: next read gets only what the guest wrote since, and a read that finds
#: nothing new (every read after the first, until the guest writes again;
#: any read just after a start) answers 500 "open : no such file or
#: directory". A stopped container's read gives LXD's log file of all
#: that was read. So the driver keeps what it read, and shows all of it.
_CONSOLES = {}
_CONSOLES_LOCK = threading.Lock()


_EMPTY_CONSOLE_ERROR = 'no such file or directory'


def power_state_of(record):
    """Nova power state of an LXD instance record (or None: no container)."""
    if record is None:
        return power_state.NOSTATE
    state = _POWER_STATES.get(record.get('status'), power_state.NOSTATE)
    if state == power_state.PAUSED and \
            record.get('config', {}).get(identity.KEY_SUSPENDED) == 'true':
        return power_state.SUSPENDED
    return state


class Guest(object):
    """The container of one instance."""

    def __init__(self, client, conf, instance):
        self._client = client
        self._conf = conf
        self.instance = instance
        prefix = conf.lxd.container_name_prefix
        self.name = identity.container_name(prefix, instance.uuid)
        self.rescue_name = identity.container_name(
            prefix, instance.uuid, identity.ROLE_RESCUE)

    def record(self):
        return self._client.get_container(self.name)

    def require_record(self):
        record = self.record()
        if record is None:
            raise exception.ContainerNotFound(instance_id=self.instance.uuid,
                                              container=self.name)
        return record

    def status(self):
        return self.require_record()['status']

    # -- create / delete --------------------------------------------------

    def create(self, container, alias, profiles):
        self._client.create_container(
            self.name, container['config'], container['devices'], profiles,
            source={'type': 'image', 'alias': alias})

    def push_files(self, files):
        """Write files into the (stopped) container.

        :param files: (path, contents) pairs (nova's injected files), or
            (path, contents, mode) triples.
        """
        for path, contents, *mode in files:
            parent = path.rsplit('/', 1)[0]
            if parent:
                self._make_parents(parent)
            if isinstance(contents, str):
                contents = contents.encode('utf-8')
            self._client.push_file(self.name, path, contents,
                                   mode=mode[0] if mode else 0o644)

    def _make_parents(self, directory):
        current = ''
        for part in directory.strip('/').split('/'):
            current += '/' + part
            self._client.make_directory(self.name, current)

    def delete(self):
        """Stop (forcefully) and delete; absent containers are fine.

        :returns: whether there was anything (container or rescue
            container) to delete.
        """
        deleted = False
        with _CONSOLES_LOCK:
            _CONSOLES.pop(self.name, None)
        for name in (self.rescue_name, self.name):
            if self._client.remove_container(name):
                deleted = True
                LOG.info('Deleted LXD container %s', name,
                         instance=self.instance)
        return deleted

    # -- power ------------------------------------------------------------

    def start(self):
        self._client.change_state(self.name, 'start')

    def ensure_running(self):
        try:
            status = self.status()
        except exception.ContainerNotFound:
            # not InstanceNotFound: nova records no fault for that one
            raise exception.ContainerGone(container=self.name,
                                          instance_id=self.instance.uuid)
        if status == 'Frozen':
            self.unpause()
        elif status != 'Running':
            self.start()

    def stop(self, timeout=0, retry_interval=0):
        """Clean shutdown within ``timeout`` seconds, then force.

        LXD sends SIGPWR once and waits; ``retry_interval`` is honoured by
        splitting the wait into rounds, each a fresh clean-stop request.
        """
        try:
            status = self.status()
        except exception.ContainerNotFound:
            # Deleted behind nova's back: the lifecycle watcher reported it
            # stopped and nova stops the server; there is nothing to stop.
            LOG.warning('The container %s is gone from the daemon; the '
                        'server is stopped. Rebuild or delete it.',
                        self.name, instance=self.instance)
            return
        if status == 'Frozen':
            self._client.change_state(self.name, 'unfreeze')
        elif status == 'Stopped':
            return
        deadline = time.monotonic() + max(timeout, 0)
        interval = retry_interval if retry_interval > 0 else timeout
        while timeout > 0 and time.monotonic() < deadline:
            wait = max(1, int(min(interval, deadline - time.monotonic())))
            try:
                self._client.change_state(self.name, 'stop', timeout=wait)
                return
            except exception.LXDOperationFailed as exc:
                LOG.debug('Clean stop not finished in %(wait)ss: %(exc)s',
                          {'wait': wait, 'exc': exc}, instance=self.instance)
            if self.status() == 'Stopped':
                return
        LOG.info('Forcing the container to stop', instance=self.instance)
        self._client.change_state(self.name, 'stop', force=True)

    def reboot(self, hard):
        status = self.status()
        if status == 'Frozen':
            self._client.change_state(self.name, 'unfreeze')
        if status == 'Stopped':
            self.start()
            return
        self.keep_console()
        if hard:
            self._client.change_state(self.name, 'restart', force=True)
            return
        try:
            self._client.change_state(
                self.name, 'restart',
                timeout=self._conf.shutdown_timeout)
        except exception.LXDOperationFailed as exc:
            LOG.warning('Soft reboot failed (%s); rebooting hard', exc,
                        instance=self.instance)
            self._client.change_state(self.name, 'restart', force=True)

    def pause(self):
        self._client.change_state(self.name, 'freeze')

    def unpause(self):
        self._client.change_state(self.name, 'unfreeze')

    def suspend(self):
        # Containers cannot be saved to disk without CRIU; a suspended
        # container is frozen and marked, so get_info says SUSPENDED.
        self._set_config(identity.KEY_SUSPENDED, 'true')
        self.pause()

    def resume(self):
        self.ensure_running()
        self._set_config(identity.KEY_SUSPENDED, None)

    def _set_config(self, key, value):
        """Set (or with None remove) one key, ETag-guarded."""
        def change(config, devices):
            if value is None:
                config.pop(key, None)
            else:
                config[key] = value

        if self._client.modify_container(self.name, change) is None:
            self.require_record()

    # -- console ----------------------------------------------------------

    def console_tail(self, max_bytes):
        """The console output nova has seen, to its last ``max_bytes``.

        Never an error because LXD has nothing new (see _CONSOLES); when
        LXD cannot be read, what was read before, if anything.
        """
        try:
            return self._read_console(max_bytes)
        except exception.ContainerNotFound:
            raise
        except exception.LXDAccelException as exc:
            with _CONSOLES_LOCK:
                seen = _CONSOLES.get(self.name, b'')
            if not seen:
                LOG.warning('Cannot read the console log: %s', exc,
                            instance=self.instance)
                raise nova_exception.ConsoleNotAvailable()
            LOG.warning('Cannot read the console log (%s); returning the '
                        'output read before', exc, instance=self.instance)
            return seen[-max_bytes:]

    def keep_console(self):
        """Read the guest's new output before nova restarts or stops it.

        The next start empties LXD's buffer.
        """
        try:
            self._read_console(self._conf.lxd.console_log_max_bytes)
        except (exception.LXDAccelException,
                exception.ContainerNotFound) as exc:
            LOG.debug('Console not read before the restart: %s', exc,
                      instance=self.instance)

    def _read_console(self, max_bytes):
        """Add what LXD has that nova has not seen; return all of it."""
        with _CONSOLES_LOCK:
            seen = _CONSOLES.get(self.name, b'')
        if seen and self.status() == 'Stopped':
            # LXD would give its log file: everything it returned before
            # (which nova has).
            return seen[-max_bytes:]
        try:
            new = self._client.console_log(self.name)
        except exception.LXDObjectNotFound:
            raise exception.ContainerNotFound(instance_id=self.instance.uuid,
                                              container=self.name)
        except exception.LXDOperationFailed as exc:
            if _EMPTY_CONSOLE_ERROR not in str(exc):
                raise
            new = b''   # nothing new since the last read or the start
        with _CONSOLES_LOCK:
            # Running: what is new. Stopped with nothing seen (after a
            # restart of nova-compute): LXD's whole log file.
            seen = (_CONSOLES.get(self.name, b'') + new)[-max_bytes:]
            _CONSOLES[self.name] = seen
        return seen

    # -- diagnostics ------------------------------------------------------

    def diagnostics(self):
        """Nova's 2.48 diagnostics from LXD's record and state API.

        ``driver`` is ``libvirt``: the API's enum has no LXD, and libvirt
        is what nova reports for its own LXC containers; ``hypervisor``
        says ``lxd``. LXD counts CPU time per container, not per vCPU, so
        there is one CPU entry, with the container's total CPU time (ns).
        LXD reports no I/O counters for a container's disks: each disk
        device is listed, its counters empty.
        """
        record = self.require_record()
        running = record.get('status') in ('Running', 'Frozen')
        state = self._client.get_state(self.name) if running else {}
        config = record.get('expanded_config') or record.get('config') or {}
        uptime = None
        if running and record.get('last_used_at'):
            started = timeutils.parse_isotime(record['last_used_at'])
            uptime = max(0, int(timeutils.delta_seconds(
                started, timeutils.utcnow(with_timezone=True))))
        diags = diagnostics_obj.Diagnostics(
            state=power_state.STATE_MAP[power_state_of(record)],
            driver='libvirt', hypervisor='lxd', hypervisor_os='linux',
            uptime=uptime, config_drive=False)
        cpu = (state.get('cpu') or {}).get('usage')
        if running:
            diags.add_cpu(id=0, time=cpu)
        memory = state.get('memory') or {}
        diags.memory_details = diagnostics_obj.MemoryDiagnostics(
            maximum=_mib(config.get('limits.memory')) or
            self.instance.flavor.memory_mb,
            used=(memory.get('usage') or 0) // (1024 * 1024))
        for name, nic in sorted((state.get('network') or {}).items()):
            if nic.get('type') == 'loopback':
                continue
            counters = nic.get('counters') or {}
            diags.add_nic(
                mac_address=nic.get('hwaddr') or None,
                rx_octets=counters.get('bytes_received'),
                rx_errors=counters.get('errors_received'),
                rx_drop=counters.get('packets_dropped_inbound'),
                rx_packets=counters.get('packets_received'),
                tx_octets=counters.get('bytes_sent'),
                tx_errors=counters.get('errors_sent'),
                tx_drop=counters.get('packets_dropped_outbound'),
                tx_packets=counters.get('packets_sent'))
        devices = record.get('expanded_devices') or record.get('devices')
        for name, device in sorted((devices or {}).items()):
            if device.get('type') in ('disk', 'unix-block'):
                diags.add_disk()
        return diags


def _mib(size):
    """MiB of an LXD size such as ``128MiB`` or ``2GiB`` (else None)."""
    units = {'KiB': 1.0 / 1024, 'MiB': 1, 'GiB': 1024, 'TiB': 1024 * 1024,
             'kB': 1000.0 / 1024 ** 2, 'MB': 1000.0 ** 2 / 1024 ** 2,
             'GB': 1000.0 ** 3 / 1024 ** 2}
    text = str(size or '').strip()
    for unit, factor in units.items():
        if text.endswith(unit) and text[:-len(unit)].isdigit():
            return int(int(text[:-len(unit)]) * factor)
    if text.isdigit():
        return int(text) // (1024 * 1024)
    return None
