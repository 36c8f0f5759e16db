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

"""Validators for the ``lxd:`` flavor extra specs.

Registered through nova's ``nova.api.extra_spec_validators`` entry point:
from API microversion 2.86 the Nova API rejects a bad value, or an unknown
``lxd:`` key, with HTTP 400 naming the key and what it accepts.
"""

import re

from nova.api.validation.extra_specs import base
from nova import exception
from oslo_utils import strutils

from nova_lxd_accel import exception as lxd_exception
from nova_lxd_accel.extra_specs import sharing_modes
from nova_lxd_accel import placement_names

#: The kernel's PID_MAX_LIMIT on 64-bit hosts: the pids cgroup refuses a
#: larger ``pids.max`` (LXD ``limits.processes``), so the boot would fail.
MAX_PROCESSES = 4 * 1024 * 1024

#: The largest ``lxd:gpu_memory_mb`` accepted: 1 TiB in MiB, far above any
#: card today; the real bound is the shared GPU's CUSTOM_GPU_MEMORY_MB
#: inventory in Placement.
MAX_GPU_MEMORY_MB = 1024 * 1024

#: The Placement resource class that carries a shared GPU's memory.
GPU_MEMORY_RC = 'CUSTOM_GPU_MEMORY_MB'


class LXDExtraSpecValidator(base.ExtraSpecValidator):
    """Nova's validator, with messages that name the key and its values.

    Nova's own messages say only what is wrong with the value; an operator
    typing ``openstack flavor set --property`` deserves to see which key
    was refused and what it accepts.
    """

    def validate(self, name, value):
        try:
            super(LXDExtraSpecValidator, self).validate(name, value)
        except exception.ValidationError as exc:
            raise exception.ValidationError(
                "Validation failed for extra spec '%s': %s Allowed: %s." % (
                    name, str(exc).replace('Validation failed; ', ''),
                    self.value.get('description', self.value['type'])))


def _flag(name, description):
    """A validator of a true/false extra spec."""
    return LXDExtraSpecValidator(
        name=name, description=description,
        value={'type': bool, 'description': 'true or false'})


EXTRA_SPEC_VALIDATORS = [
    _flag('lxd:privileged', (
        'Run the container privileged (container root is host root). '
        'Refused at boot unless the compute host sets [lxd] '
        'allow_privileged_containers = true.')),
    _flag('lxd:nesting', (
        'Allow containers inside the container (LXD security.nesting). '
        'Refused at boot unless the compute host sets [lxd] '
        'allow_nesting = true.')),
    _flag('lxd:isolated_idmap', (
        'Whether the container gets a host user-id range of its own '
        '(LXD security.idmap.isolated), so its root cannot touch files '
        'of other containers. Unset: the compute host\'s [lxd] '
        'isolated_idmap (true by default). A share of a GPU with MPS '
        'quotas (lxd:gpu_memory_mb) needs false: an MPS server serves one '
        'host user at a time.')),
    LXDExtraSpecValidator(
        name='lxd:processes',
        description='Largest number of processes in the container '
                    '(LXD limits.processes).',
        value={'type': int, 'min': 1, 'max': MAX_PROCESSES,
               'description': 'an integer from 1 to %d (the kernel\'s '
                              'largest process id)' % MAX_PROCESSES},
    ),
    LXDExtraSpecValidator(
        name='lxd:gpu_runtime',
        description=(
            'Inject the host\'s GPU user space into the container: '
            '``nvidia`` sets LXD nvidia.runtime (needs the NVIDIA container '
            'toolkit on the host); ``none`` (default) injects nothing.'),
        value={'type': str, 'enum': ['none', 'nvidia'],
               'description': 'none or nvidia'},
    ),
    LXDExtraSpecValidator(
        name='lxd:gpu_memory_mb',
        description=(
            'On a GPU shared with MPS quotas, the MiB of GPU memory the '
            'container may allocate (NVIDIA MPS '
            'CUDA_MPS_PINNED_DEVICE_MEM_LIMIT). The flavor must also '
            'request resources1:%s with the same number, with '
            'resources1:CUSTOM_GPU_SHARE=1 (one GPU gives both) and '
            'trait1:CUSTOM_GPU_SHARING_QUOTA=required, so Placement never '
            'over-commits the card; checked when an instance boots.'
            % GPU_MEMORY_RC),
        value={'type': int, 'min': 1, 'max': MAX_GPU_MEMORY_MB,
               'description': 'an integer from 1 to %d (MiB)'
                              % MAX_GPU_MEMORY_MB},
    ),
    LXDExtraSpecValidator(
        name='lxd:gpu_compute_percent',
        description=(
            'On a GPU shared with MPS quotas, the percentage of the GPU\'s '
            'streaming multiprocessors the container may use (NVIDIA MPS '
            'CUDA_MPS_ACTIVE_THREAD_PERCENTAGE); only with '
            'lxd:gpu_memory_mb.'),
        value={'type': int, 'min': 1, 'max': 100,
               'description': 'an integer from 1 to 100 (percent)'},
    ),
]


def register():
    return EXTRA_SPEC_VALIDATORS


_VALIDATORS = {validator.name: validator
               for validator in EXTRA_SPEC_VALIDATORS}

#: lxd: keys a flavor may set only where the operator allows it, with
#: the HostPolicy attribute and option that allow them.
_OPERATOR_GATED = {
    'lxd:privileged': ('allow_privileged', 'a privileged container',
                       'allow_privileged_containers'),
    'lxd:nesting': ('allow_nesting', 'nested containers', 'allow_nesting'),
}


def check_flavor(flavor, policy):
    """Refuse a flavor whose ``lxd:`` extra specs this host cannot honour.

    The Nova API checks extra specs only from microversion 2.86, so a
    flavor made with an older one (the CLI's default) can carry any value.
    Spawn calls this first, before anything is created, whatever
    microversion made the flavor: every ``lxd:`` key must be known and
    valid, and the operator-gated ones allowed by ``policy`` (a
    :class:`nova_lxd_accel.container.builder.HostPolicy`).

    :raises: FlavorExtraSpecInvalid naming the key, its value and why;
        FlavorNotAllowed for a valid key the operator forbids.
    """
    specs = flavor.extra_specs or {}
    for key in sorted(specs):
        if not key.startswith('lxd:'):
            continue
        value = specs[key]
        validator = _VALIDATORS.get(key)
        if validator is None:
            raise lxd_exception.FlavorExtraSpecInvalid(
                flavor=flavor.name, key=key, value=value,
                reason='unknown key; nova-lxd-accel knows %s'
                       % ', '.join(sorted(_VALIDATORS)))
        try:
            validator.validate(key, str(value))
        except exception.ValidationError as exc:
            raise lxd_exception.FlavorExtraSpecInvalid(
                flavor=flavor.name, key=key, value=value, reason=str(exc))
        gate = _OPERATOR_GATED.get(key)
        if gate and strutils.bool_from_string(value, strict=True) and \
                not getattr(policy, gate[0]):
            raise lxd_exception.FlavorNotAllowed(
                flavor=flavor.name,
                feature='%s (%s=%s)' % (gate[1], key, value),
                how='an operator must set [lxd] %s = true on this host'
                    % gate[2])
    _check_gpu_memory_request(flavor, specs)
    _check_sharing_mode_traits(flavor, specs)


def _inconsistent(flavor, reason):
    return lxd_exception.FlavorExtraSpecsInconsistent(flavor=flavor.name,
                                                      reason=reason)


#: a request group's suffix in ``resources<suffix>:`` / ``trait<suffix>:``
#: ('' for the unnumbered group), as nova reads them
_GROUP = r'(\d*|_[A-Za-z0-9_-]+)'


def _groups(specs, prefix, name):
    """Suffixes of the request groups with a ``<prefix><suffix>:<name>``."""
    out = []
    for key in specs:
        match = re.match(r'^%s%s:%s$' % (prefix, _GROUP, re.escape(name)),
                         key)
        if match:
            out.append(match.group(1))
    return out


def _check_gpu_memory_request(flavor, specs):
    """A memory quota must equal the flavor's Placement memory request.

    Placement counts a shared GPU's memory only through the
    ``resources<N>:CUSTOM_GPU_MEMORY_MB`` request; the MPS limit enforces
    ``lxd:gpu_memory_mb`` inside the card. Only when both are the same
    number, and the slot and the memory come from one GPU (one numbered
    request group: in the unnumbered one Placement may take them from two
    GPUs of the host), can the quotas of the instances on one card never
    add up to more than its memory. Nova's API checks one key at a time,
    so these are checked here, at boot.
    """
    quota = specs.get('lxd:gpu_memory_mb')
    memory_groups = _groups(specs, 'resources', GPU_MEMORY_RC)
    request = (specs['resources%s:%s' % (memory_groups[0], GPU_MEMORY_RC)]
               if memory_groups else None)
    if quota is None and specs.get('lxd:gpu_compute_percent') is not None:
        # a quota'd card needs every sharer limited in memory, and a
        # time-sliced card runs no MPS that could limit compute
        raise _inconsistent(flavor, (
            'set lxd:gpu_memory_mb too, or unset lxd:gpu_compute_percent: '
            'on a GPU shared with MPS quotas every instance needs a memory '
            'quota, and a time-sliced GPU has no MPS'))
    if quota is None and request is None:
        return
    if quota is None:
        raise _inconsistent(flavor, (
            'set lxd:gpu_memory_mb=%s: it requests resources%s:%s=%s from '
            'Placement, which MPS would not enforce' % (
                request, memory_groups[0], GPU_MEMORY_RC, request)))
    if request is None or str(request).strip() != str(int(quota)):
        raise _inconsistent(flavor, (
            'set resources1:%s=%s to match lxd:gpu_memory_mb=%s (it '
            'requests %s), so that Placement counts the memory MPS '
            'enforces' % (GPU_MEMORY_RC, quota, quota,
                          request if request is not None else 'none')))
    share_groups = _groups(specs, 'resources', placement_names.SHARE_RC)
    if not memory_groups[0] or share_groups != memory_groups:
        raise _inconsistent(flavor, (
            'request the slot and the memory in one numbered group '
            '(resources1:%s=1 and resources1:%s=%s): otherwise Placement '
            'may take them from two different GPUs' % (
                placement_names.SHARE_RC, GPU_MEMORY_RC, quota)))


def _check_sharing_mode_traits(flavor, specs):
    """A flavor must require its own sharing mode's trait, with its slot.

    A share with ``lxd:gpu_memory_mb`` lands only on a GPU shared with
    quotas, one without only on a time-sliced GPU (see
    :mod:`.binding.sharing`): requiring the other mode's trait
    could never be satisfied, or would land where spawn refuses it; a
    trait in another request group than the slot's constrains another
    provider than the slot's GPU.
    """
    required = sharing_modes.required_mode_traits(specs)
    mode = sharing_modes.flavor_mode(specs)
    share_groups = _groups(specs, 'resources', placement_names.SHARE_RC)
    group = share_groups[0] if share_groups else None
    wrong = sorted(key for other, keys in required.items() for key in keys
                   if other != mode or
                   (group is not None and key.split(':')[0] != 'trait' +
                    group))
    if wrong:
        raise _inconsistent(flavor, (
            'require trait%s:%s=required instead of %s: its share is %s '
            '(it %s lxd:gpu_memory_mb)' % (
                group or '', sharing_modes.MODE_TRAITS[mode],
                ', '.join('%s=required' % key for key in wrong), mode,
                'sets' if mode == sharing_modes.MODE_QUOTA else 'sets no')))
