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

"""The compute API answers cASO and cloud-info-provider read, recorded.

cASO 5.2.2 pins ``oslo.concurrency<7`` and nova 34 needs 7.x, so the two
cannot run in one environment. This test runs the in-process cloud with
the recorded GPU host (its H100 in MIG mode, its GT 730 shared in
:data:`SLOTS` slots), creates the ``1g.10gb`` slice flavor and the share
flavor ``nova-lxd-accel flavors`` proposes plus a CPU flavor, boots a
server of each, lets nova-compute's GPU probe account two periods (the
GT 730 busy in the second, the H100 idle), writes the usage export
(``nova-lxd-accel usage --export``), deletes the GPU servers, and records
the compute API's answers to exactly the requests cASO's and
cloud-info-provider's novaclient make (microversion 2.1: servers carry a
flavor id). With ``NOVA_LXD_ACCEL_FEDERATION_DUMP=<file>`` it writes them
there, with the export; ``tests/federation`` (tox env ``federation``)
serves them over HTTP to the real cASO extractors and the real
cloud-info-provider.
"""

import json
import os
import time

import fixtures
from oslo_utils import timeutils

from nova_lxd_accel.advice import flavor_proposals
from nova_lxd_accel import conf
from tests.fixtures import gpu_gate_host

DUMP_ENV = 'NOVA_LXD_ACCEL_FEDERATION_DUMP'
EPOCH = '2000-01-01T00:00:00'
SLOTS = 4
MIG_FLAVOR = 'g1.h100-80gb-hbm3-1g.10gb'
SHARE_FLAVOR = 'g1.geforce-gt-730-share-1of%d' % SLOTS


class TestFederationExport(gpu_gate_host.GpuHostTestCase):

    def setUp(self):
        conf.register_opts(gpu_gate_host.CONF)
        self.flags(shared_gpus=['%s:%d' % (gpu_gate_host.GT730_PCI, SLOTS)],
                   group='lxd_accelerators')
        super().setUp()

    def _probe_two_periods(self):
        """Two probes ~1 s apart, the GT 730 busy at the second.

        The wait also makes both GPU servers live a second or more, so
        their records' AvailableDuration (whole seconds) is not 0.
        """
        self.periodic()
        time.sleep(1.2)
        self.set_apps(gpu_gate_host.app_row(gpu_gate_host.GT730_PCI, 4242,
                                            'python3', 100))
        self.periodic()
        self.set_apps()

    def test_record_the_api_answers(self):
        admin = self.api_fixture.admin_api
        admin.microversion = '2.86'
        driver = self.computes[gpu_gate_host.HOST].driver
        snapshot = driver._parts.gate.last_snapshot
        memory = {pci: g.memory_total_mib for pci, g in snapshot.gpus.items()}
        proposals = {p.name: p for p in flavor_proposals.propose(
            driver._parts.inventory.reported_gpus(), memory, vcpus=1,
            ram=128, disk=0)}
        for name in (MIG_FLAVOR, SHARE_FLAVOR):
            gpu_gate_host.ApiFlavors(admin).create(proposals[name])
        by_name = {f['name']: f['id'] for f in admin.get_flavors()}
        cpu_flavor = self._create_flavor(name='m1.cpu', memory_mb=128,
                                         vcpu=1, disk=0, ephemeral=0)
        mig = self.boot(by_name[MIG_FLAVOR])
        share = self.boot(by_name[SHARE_FLAVOR])
        cpu = self.boot(cpu_flavor)
        self._probe_two_periods()
        export_path = os.path.join(
            self.useFixture(fixtures.TempDir()).path, 'usage.json')
        self.capture_cli('usage', '--export', export_path)
        with open(export_path) as f:
            export = json.load(f)
        self._delete_server(mig)
        self._delete_server(share)
        start = timeutils.utcnow().replace(year=2000, month=1, day=1)
        end = timeutils.utcnow().replace(microsecond=0)
        end = end.replace(year=end.year + 1)

        api = self.api
        before, api.microversion = api.microversion, '2.1'
        self.addCleanup(setattr, api, 'microversion', before)
        project = api.project_id
        answers = {
            '/servers/detail': api.api_get(
                '/servers/detail?changes-since=%s' % EPOCH).body,
            '/flavors/detail': api.api_get('/flavors/detail').body,
            '/os-simple-tenant-usage/%s' % project: api.api_get(
                '/os-simple-tenant-usage/%s?start=%s&end=%s' % (
                    project, start.isoformat(), end.isoformat())).body,
        }
        for flavor in answers['/flavors/detail']['flavors']:
            answers['/flavors/%s/os-extra_specs' % flavor['id']] = \
                api.api_get('/flavors/%s/os-extra_specs' %
                            flavor['id']).body
        for server in answers['/servers/detail']['servers']:
            if server['status'] == 'DELETED':
                continue        # 404, as caso's servers.get would see
            answers['/servers/%s' % server['id']] = api.api_get(
                '/servers/%s' % server['id']).body
        servers = {s['id']: s for s in answers['/servers/detail']['servers']}
        self.assertEqual({mig['id'], share['id'], cpu['id']}, set(servers))
        for server, flavor in ((mig, MIG_FLAVOR), (share, SHARE_FLAVOR)):
            self.assertEqual('DELETED', servers[server['id']]['status'])
            self.assertIsNotNone(
                servers[server['id']]['OS-SRV-USG:terminated_at'])
            self.assertEqual(by_name[flavor],
                             servers[server['id']]['flavor']['id'])
        # the probe measured both units, the share's busy, the slice's not
        busy = {instance: sum(u['busy_s'] for u in entry['units'].values())
                for instance, entry in export['usage'].items()}
        self.assertEqual(0, busy[mig['id']])
        self.assertGreater(busy[share['id']], 0)
        dump = {'project_id': project, 'gpu_server': mig['id'],
                'share_server': share['id'], 'cpu_server': cpu['id'],
                'slots': SLOTS, 'usage_export': export, 'answers': answers,
                'period': [start.isoformat(), end.isoformat()]}
        path = os.environ.get(DUMP_ENV)
        if path:
            with open(path, 'w') as f:
                json.dump(dump, f, indent=1, sort_keys=True)
