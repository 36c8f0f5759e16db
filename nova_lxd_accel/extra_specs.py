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

from nova.api.validation.extra_specs import base
from nova import exception


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


EXTRA_SPEC_VALIDATORS = [
    LXDExtraSpecValidator(
        name='lxd:privileged',
        description=(
            'Run the container privileged (container root is host root). '
            'Refused at boot unless the compute host sets [lxd] '
            'allow_privileged_containers = true.'),
        value={'type': bool, 'description': 'true or false'},
    ),
    LXDExtraSpecValidator(
        name='lxd:nesting',
        description=(
            'Allow containers inside the container (LXD security.nesting). '
            'Refused at boot unless the compute host sets [lxd] '
            'allow_nesting = true.'),
        value={'type': bool, 'description': 'true or false'},
    ),
    LXDExtraSpecValidator(
        name='lxd:isolated_idmap',
        description=(
            'Give the container a user-id range of its own '
            '(LXD security.idmap.isolated), so its root cannot touch files '
            'of other containers.'),
        value={'type': bool, 'description': 'true or false'},
    ),
    LXDExtraSpecValidator(
        name='lxd:processes',
        description='Largest number of processes in the container '
                    '(LXD limits.processes).',
        value={'type': int, 'min': 1, 'description': 'a positive integer'},
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
]


def register():
    return EXTRA_SPEC_VALIDATORS
