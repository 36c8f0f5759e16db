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
the recorded GPU host, creates the GPU flavors ``nova-lxd-accel flavors``
proposes plus a CPU flavor, boots a server of each, deletes the GPU one,
and records the compute API's answers to exactly the requests cASO's and
cloud-info-provider's novaclient make (microversion 2.1: servers carry a
flavor id). With ``NOVA_LXD_ACCEL_FEDERATION_DUMP=<file>`` it writes them
there; ``tests/federation`` (tox env ``federation``) serves them over HTTP
to the real cASO extractor and the real cloud-info-provider.
"""

import json
import os

from oslo_utils import timeutils

from nova_lxd_accel.accel import flavors
from tests.functional import test_gpu_flavors
from tests.functional import test_gpu_gate

DUMP_ENV = 'NOVA_LXD_ACCEL_FEDERATION_DUMP'
EPOCH = '2000-01-01T00:00:00'


class TestFederationExport(test_gpu_gate.GpuHostTestCase):

    def test_record_the_api_answers(self):
        admin = self.api_fixture.admin_api
        admin.microversion = '2.86'
        driver = self.computes[test_gpu_gate.HOST].driver
        proposals = [p for p in flavors.propose(
            driver._parts.inventory.reported_gpus(), vcpus=1, ram=128, disk=0)
            if p.name == 'g1.h100-80gb-hbm3-1g.10gb']
        test_gpu_flavors.ApiFlavors(admin).create(proposals[0])
        by_name = {f['name']: f['id'] for f in admin.get_flavors()}
        cpu_flavor = self._create_flavor(name='m1.cpu', memory_mb=128,
                                         vcpu=1, disk=0, ephemeral=0)
        gpu = self.boot(by_name['g1.h100-80gb-hbm3-1g.10gb'])
        cpu = self.boot(cpu_flavor)
        self._delete_server(gpu)
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
        self.assertEqual({gpu['id'], cpu['id']}, set(servers))
        self.assertEqual('DELETED', servers[gpu['id']]['status'])
        self.assertIsNotNone(servers[gpu['id']]['OS-SRV-USG:terminated_at'])
        self.assertEqual(by_name['g1.h100-80gb-hbm3-1g.10gb'],
                         servers[gpu['id']]['flavor']['id'])
        dump = {'project_id': project, 'gpu_server': gpu['id'],
                'cpu_server': cpu['id'], 'answers': answers,
                'period': [start.isoformat(), end.isoformat()]}
        path = os.environ.get(DUMP_ENV)
        if path:
            with open(path, 'w') as f:
                json.dump(dump, f, indent=1, sort_keys=True)
