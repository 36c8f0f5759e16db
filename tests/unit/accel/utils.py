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

"""Helpers shared by the accelerator unit tests."""

import copy
import json
import os

from nova.compute import provider_tree
from oslo_config import cfg

from nova_lxd_accel.accel.inventory import reporter
from nova_lxd_accel.conf import accelerators

SAMPLES = os.path.join(os.path.dirname(__file__), 'samples')
NODE = 'cmp1'
ROOT_UUID = '00000000-0000-0000-0000-00000000c0de'


def sample_path(name):
    return os.path.join(SAMPLES, name)


def load_json(name):
    with open(sample_path(name)) as f:
        return json.load(f)


def load_text(name):
    with open(sample_path(name)) as f:
        return f.read()


def make_conf(**overrides):
    """A private ConfigOpts with the ``[lxd_accelerators]`` options.

    Defaults unless overridden by keyword (option name = value).
    """
    conf = cfg.ConfigOpts()
    # Registered under a group *name*: oslo.config keeps overrides on the
    # OptGroup object, and the module's OptGroup is shared by every
    # ConfigOpts it is registered in.
    conf.register_opts(accelerators.ALL_OPTS, group='lxd_accelerators')
    conf([], default_config_files=[])
    for key, value in overrides.items():
        conf.set_override(key, value, group='lxd_accelerators')
    return conf


def eight_gpu_cards():
    """8 whole GPUs shaped like the H100 sample card, at 0000:1N:00.0."""
    card = load_json('handmade-lxd-h100-mig-host.json')['gpu']['cards'][1]
    cards = []
    for i in range(8):
        c = copy.deepcopy(card)
        c['pci_address'] = '0000:1%d:00.0' % i
        c['nvidia']['uuid'] = 'GPU-%08d-0000-0000-0000-000000000000' % i
        cards.append(c)
    return cards


def new_tree(nodename=NODE):
    tree = provider_tree.ProviderTree()
    tree.new_root(nodename, ROOT_UUID)
    return tree


def summary(tree, nodename=NODE):
    """{child name: ({rc: total}, {traits})} of every child of nodename."""
    out = {}
    for uuid in tree.get_provider_uuids(nodename)[1:]:
        data = tree.data(uuid)
        out[data.name] = ({rc: rec['total'] for rc, rec in
                           data.inventory.items()}, set(data.traits))
    return out


def report(resources, mig_text='', conf=None, nodename=NODE, tree=None,
           allocations=None):
    """Run a fresh AcceleratorInventory once; returns (inventory, tree)."""
    inventory = reporter.AcceleratorInventory(
        lambda: resources, lambda: mig_text, conf=conf or make_conf(),
        provider_allocations=lambda rp: {})
    tree = tree or new_tree(nodename)
    inventory.update_provider_tree(
        tree, nodename, allocations if allocations is not None else {})
    return inventory, tree
