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

import time

from nova.compute import power_state
from oslo_log import log as logging

from nova_lxd_accel import config as lxd_config
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


def power_state_of(record):
    """Nova power state of an LXD instance record (or None: no container)."""
    if record is None:
        return power_state.NOSTATE
    state = _POWER_STATES.get(record.get('status'), power_state.NOSTATE)
    if state == power_state.PAUSED and \
            record.get('config', {}).get(lxd_config.KEY_SUSPENDED) == 'true':
        return power_state.SUSPENDED
    return state


class Guest(object):
    """The container of one instance."""

    def __init__(self, client, conf, instance):
        self._client = client
        self._conf = conf
        self.instance = instance
        prefix = conf.lxd.container_name_prefix
        self.name = lxd_config.container_name(prefix, instance.uuid)
        self.rescue_name = lxd_config.rescue_container_name(
            prefix, instance.uuid)

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
        """Write nova's injected files into the (stopped) container."""
        for path, contents in files:
            parent = path.rsplit('/', 1)[0]
            if parent:
                self._make_parents(parent)
            if isinstance(contents, str):
                contents = contents.encode('utf-8')
            self._client.push_file(self.name, path, contents)

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
        status = self.status()
        if status == 'Frozen':
            self.unpause()
        elif status != 'Running':
            self.start()

    def stop(self, timeout=0, retry_interval=0):
        """Clean shutdown within ``timeout`` seconds, then force.

        LXD sends SIGPWR once and waits; ``retry_interval`` is honoured by
        splitting the wait into rounds, each a fresh clean-stop request.
        """
        status = self.status()
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
        self._set_config(lxd_config.KEY_SUSPENDED, 'true')
        self.pause()

    def resume(self):
        self.ensure_running()
        self._set_config(lxd_config.KEY_SUSPENDED, None)

    def _set_config(self, key, value):
        record = self.require_record()
        config = dict(record['config'])
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
        record['config'] = config
        self._client.put_container(self.name, record)

    # -- console ----------------------------------------------------------

    def console_tail(self, max_bytes):
        log = self._client.console_log(self.name)
        return log[-max_bytes:]
