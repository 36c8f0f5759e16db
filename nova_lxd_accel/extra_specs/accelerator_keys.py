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

"""Validators for the ``Accelerator:`` flavor extra specs.

Registered through nova's ``nova.api.extra_spec_validators`` entry point
(name ``accelerator``): from API microversion 2.86 a typo in the key
(``Accelerator:Numbr``) or a bad value (``Accelerator:Number=0.5``) gets
HTTP 400. The keys are the ones cASO and cloud-info-provider read; see
:mod:`nova_lxd_accel.advice.flavor_proposals` for their meaning and the MIG
convention.
"""

from nova_lxd_accel.extra_specs import lxd_keys


def _name(name, description, longest):
    """A validator of a name of 1 to ``longest`` characters."""
    return lxd_keys.LXDExtraSpecValidator(
        name=name, description=description,
        value={'type': str, 'pattern': r'\S.{0,%d}' % (longest - 1),
               'description': 'a name of 1 to %d characters' % longest})


EXTRA_SPEC_VALIDATORS = [
    lxd_keys.LXDExtraSpecValidator(
        name='Accelerator:Type',
        description='Kind of accelerator, for accounting (cASO) and the '
                    'information system (cloud-info-provider).',
        value={'type': str, 'enum': ['GPU', 'FPGA', 'TPU', 'NPU', 'other'],
               'description': 'GPU, FPGA, TPU, NPU or other'},
    ),
    _name('Accelerator:Vendor', 'Accelerator vendor, e.g. NVIDIA.', 64),
    _name('Accelerator:Model',
          'Accelerator model without the vendor, e.g. "A100-SXM4-80GB" or, '
          'for a MIG slice, "A100-SXM4-80GB MIG 1g.10gb".', 128),
    lxd_keys.LXDExtraSpecValidator(
        name='Accelerator:Number',
        description='How many accelerators (whole GPUs, or MIG slices for '
                    'a MIG flavor) an instance gets; a whole number, as '
                    'cASO and cloud-info-provider require.',
        value={'type': int, 'min': 1, 'max': 64,
               'description': 'an integer from 1 to 64'},
    ),
    lxd_keys.LXDExtraSpecValidator(
        name='Accelerator:Memory',
        description='Memory of one accelerator (or MIG slice) in MiB.',
        value={'type': int, 'min': 1,
               'description': 'a positive integer (MiB)'},
    ),
    lxd_keys.LXDExtraSpecValidator(
        name='Accelerator:VirtualizationType',
        description='How the instance gets the accelerator: passthrough '
                    '(whole device), MIG (a MIG slice), shared (a share of a '
                    'GPU), vGPU or SR-IOV.',
        value={'type': str,
               'enum': ['passthrough', 'MIG', 'shared', 'vGPU', 'SR-IOV'],
               'description': 'passthrough, MIG, shared, vGPU or SR-IOV'},
    ),
]


def register():
    return EXTRA_SPEC_VALIDATORS
