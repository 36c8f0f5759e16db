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

"""The binding record: what one claim bound.

Its units, the LXD devices and config they need, and the record written
into the container (``user.nova_lxd_accel.devices``, see :mod:`.pick`):
the daemon's own record of who holds which unit. Not the *ledger* (the
GPU gate's state file of bound, dirty and held units,
:mod:`nova_lxd_accel.accel.health.gate_state`), which a claim reads and
tells of what it bound.
"""

import dataclasses
import json
import typing

from nova_lxd_accel.accel.binding import cdi
from nova_lxd_accel.accel.binding import sharing
from nova_lxd_accel.accel import devices
from nova_lxd_accel.accel import units
from nova_lxd_accel.container import identity


@dataclasses.dataclass(frozen=True)
class Unit:
    """One bound unit: what the container got and where it came from.

    :ivar key: the unit's identity on the host (``pci:<address>``,
        ``mig:<uuid>`` or ``mig:<gpu pci>/<gi>/<ci>``, ``netdev:<name>``),
        unique across all units of the host.
    """

    name: str
    kind: str
    resource_class: str
    provider: str
    device_pci: str
    key: str
    device: typing.Dict[str, str]
    detail: typing.Dict[str, str]

    def record(self):
        out = {'name': self.name, 'kind': self.kind,
               'resource_class': self.resource_class,
               'provider': self.provider, 'pci': self.device_pci,
               'unit': self.key}
        out.update(self.detail)
        return out


@dataclasses.dataclass(frozen=True)
class Binding:
    units: typing.Tuple[Unit, ...] = ()
    #: how NVIDIA devices were bound (see :mod:`.cdi`)
    nvidia: cdi.NvidiaBinding = cdi.RUNTIME

    @property
    def devices(self):
        """LXD device name -> device dict, for the container."""
        out = {u.name: dict(u.device) for u in self.units}
        out.update(self._mps()[0])
        return out

    def _mps_unit(self):
        """The slot of a shared GPU with an MPS quota, or None."""
        for unit in self.units:
            if unit.kind == units.KIND_SHARE and unit.detail.get('mps_pipe'):
                return unit
        return None

    def _mps(self):
        """(devices, config) of the MPS quota of a shared GPU, if any."""
        unit = self._mps_unit()
        if unit is None:
            return {}, {}
        devs, config = sharing.lxd_config(
            unit.device_pci, unit.detail.get('gpu_memory_mb'),
            unit.detail.get('gpu_compute_percent'),
            pipe_template=unit.detail['mps_pipe'],
            shm_template=unit.detail.get(
                'mps_shm', '/run/nvidia-mps-{pci}-shm'))
        return ({k: v for k, v in devs.items()
                 if v.get('type') != 'gpu'}, config)

    @property
    def config(self):
        """Container config the binding needs (record, NVIDIA runtime)."""
        if not self.units:
            return {}
        config = {identity.KEY_DEVICES: json.dumps(
            [u.record() for u in self.units], sort_keys=True)}
        if any(u.detail.get('cdi_id') for u in self.units):
            # LXD refuses a CDI id while any nvidia.* option is true (a
            # flavor's lxd:gpu_runtime); CDI brings the user space itself.
            config['nvidia.runtime'] = 'false'
        elif any(u.kind == units.KIND_MIG for u in self.units):
            # LXD refuses to start a MIG device without it.
            config['nvidia.runtime'] = 'true'
        config.update(self._mps()[1])
        return config

    @property
    def mps_variables(self):
        """``{name: value}`` of the MPS client; empty without a quota.

        What the container's files for logins, cron and services carry
        (see :mod:`.mps_environment`); its config has them too.
        """
        unit = self._mps_unit()
        if unit is None:
            return {}
        return sharing.mps_variables(
            devices.normalise_pci_address(unit.device_pci),
            unit.detail.get('gpu_memory_mb'),
            unit.detail.get('gpu_compute_percent'),
            pipe_template=unit.detail['mps_pipe'])

    def records(self):
        return [u.record() for u in self.units]


def expected_usage(records):
    """Provider uuid -> {rc: amount} the binding records account for."""
    usage = {}
    for record in records:
        per_rp = usage.setdefault(record.get('provider'), {})
        rc = record.get('resource_class')
        per_rp[rc] = per_rp.get(rc, 0) + 1
    return usage


def log_bound(log, bound, instance):
    """Log, per unit, which host device an instance was given."""
    for unit in bound.units:
        log.info('Bound %(rc)s %(unit)s of provider %(rp)s as LXD device '
                 '%(name)s', {'rc': unit.resource_class, 'unit': unit.key,
                              'rp': unit.provider, 'name': unit.name},
                 instance=instance)
