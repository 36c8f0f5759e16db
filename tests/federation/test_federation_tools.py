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

"""The real cASO 5.2.2 and cloud-info-provider 1.2.0 on the driver's flavors.

Runs in its own environment (tox env ``federation``): cASO pins
``oslo.concurrency<7``, nova 34 needs 7.x. First the functional test
``tests.functional.test_federation_export`` runs in the project's
environment (``NOVA_LXD_ACCEL_NOVA_PYTHON``, default ``.venv/bin/python``)
against nova's in-process cloud with the recorded GPU host and records the
compute API's answers; then they are served over real HTTP on loopback and
read by cASO's ``NovaExtractor`` and cloud-info-provider's
``OpenStackProvider`` through their own novaclient. Only Keystone is not
involved (the in-process cloud has none): the session is keystoneauth's
``admin_token`` plugin pointing at the served endpoint, and the user name
cASO would read from Keystone is the user id.
"""

import datetime
import http.server
import json
import os
import subprocess
import sys
import tempfile
import threading
import urllib.parse

from keystoneauth1 import session as ks_session
from keystoneauth1 import token_endpoint
import novaclient.client
import testtools

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def _record():
    """Run the export functional test; returns the recorded answers.

    ``NOVA_LXD_ACCEL_FEDERATION_RECORDED=<file>`` reads a recording the
    export test wrote before instead.
    """
    recorded = os.environ.get('NOVA_LXD_ACCEL_FEDERATION_RECORDED')
    if recorded:
        with open(recorded) as f:
            return json.load(f)
    python = os.environ.get('NOVA_LXD_ACCEL_NOVA_PYTHON',
                            os.path.join(ROOT, '.venv', 'bin', 'python'))
    fd, path = tempfile.mkstemp(suffix='.json')
    os.close(fd)
    env = dict(os.environ, NOVA_LXD_ACCEL_FEDERATION_DUMP=path)
    proc = subprocess.run(
        [python, '-m', 'testtools.run',
         'tests.functional.test_federation_export'],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise AssertionError('recording the cloud failed:\n%s' %
                             (proc.stdout + proc.stderr)[-4000:])
    with open(path) as f:
        dump = json.load(f)
    os.unlink(path)
    return dump


class _Handler(http.server.BaseHTTPRequestHandler):

    answers = {}

    def do_GET(self):
        path = urllib.parse.urlsplit(self.path).path
        if path.startswith('/v2.1'):
            path = path[len('/v2.1'):]
        body = self.answers.get(path.rstrip('/'))
        if body is None:
            self.send_response(404)
            payload = json.dumps({'itemNotFound': {
                'code': 404, 'message': '%s not found' % path}})
        else:
            self.send_response(200)
            payload = json.dumps(body)
        data = payload.encode()
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


class FederationTestCase(testtools.TestCase):

    dump = None

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        if FederationTestCase.dump is None:
            FederationTestCase.dump = _record()

    def setUp(self):
        super().setUp()
        handler = type('H', (_Handler,), {'answers': self.dump['answers']})
        server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        self.endpoint = 'http://127.0.0.1:%d/v2.1' % server.server_port
        self.session = ks_session.Session(auth=token_endpoint.Token(
            self.endpoint, 'recorded'))

    def nova(self):
        return novaclient.client.Client(2, session=self.session)

    def servers(self):
        return {s['id']: s for s in
                self.dump['answers']['/servers/detail']['servers']}


def _time(text):
    return datetime.datetime.fromisoformat(text.rstrip('Z'))


class TestCaso(FederationTestCase):

    def test_accelerator_record_for_the_gpu_flavor_only(self):
        from caso.extract.openstack import nova as caso_nova
        from caso import record
        from oslo_config import cfg

        cfg.CONF([], project='caso')
        cfg.CONF.set_override('site_name', 'NOVA-LXD-ACCEL-TEST')
        cfg.CONF.set_override('service_name', 'nova-lxd-accel')
        extractor = caso_nova.NovaExtractor.__new__(caso_nova.NovaExtractor)
        extractor.project = self.dump['project_id']
        extractor.project_id = self.dump['project_id']
        extractor.vo = 'vo.example.org'
        extractor.nova = self.nova()
        extractor.users = {'admin': 'admin'}
        extractor.images = {}
        extractor.flavors = extractor._get_flavors()
        start, end = self.dump['period']
        records = extractor.extract(_time(start), _time(end))
        accel = [r for r in records if isinstance(r, record.AcceleratorRecord)]
        self.assertEqual(1, len(accel), accel)
        [rec] = accel
        gpu = self.servers()[self.dump['gpu_server']]
        self.assertEqual(self.dump['gpu_server'], str(rec.uuid))
        self.assertEqual('GPU', rec.accelerator_type)
        self.assertEqual('NVIDIA H100 80GB HBM3 MIG 1g.10gb', rec.model)
        self.assertEqual(1, rec.count)
        duration = (_time(gpu['OS-SRV-USG:terminated_at']) -
                    _time(gpu['created'])).total_seconds()
        self.assertEqual(int(duration), rec.available_duration)
        cloud = [r for r in records if isinstance(r, record.CloudRecord)]
        self.assertEqual({self.dump['gpu_server'], self.dump['cpu_server']},
                         {str(r.uuid) for r in cloud})
        message = json.loads(rec.ssm_message())
        self.assertEqual(('GPU', 1), (message['Type'], message['Count']))


class TestCloudInfoProvider(FederationTestCase):

    def test_gpu_flavors_published_as_accelerators(self):
        from cloud_info_provider import core
        from cloud_info_provider import glue
        from cloud_info_provider.providers import openstack

        # the tool's own command line parser, with its defaults
        parser = core.get_parser({'openstack': openstack.OpenStackProvider},
                                 {}, {})
        site = tempfile.NamedTemporaryFile('w', suffix='.yaml', delete=False)
        site.write('gocdb: NOVA-LXD-ACCEL-TEST\nendpoint: %s\nvos: []\n'
                   % self.endpoint)
        site.close()
        self.addCleanup(os.unlink, site.name)
        opts = parser.parse_args([site.name])
        provider = openstack.OpenStackProvider(opts)
        provider.nova = self.nova()
        # the service, manager and endpoint objects fetch() builds first
        # (without the GOCDB and CA look-ups, which need the Internet)
        provider.add_glue(glue.CloudComputingService(
            id=provider.get_service_id(), name='service', status_info='ok'))
        provider.build_manager()
        provider.add_glue(glue.CloudComputingEndpoint(
            id=provider.get_endpoint_id(), name='endpoint',
            interface_name=provider.interface_name, url=self.endpoint))
        share = glue.Share(id='share', name='share', project_id='p')
        itypes = provider.build_share_instance_types(share)
        self.assertIn('m1.cpu', [t.name for t in itypes])
        accels = provider.get_objs('CloudComputingVirtualAccelerator')
        self.assertEqual([('g1.h100-80gb-hbm3-1g.10gb_gpu', 'GPU', 1,
                           'NVIDIA', 'H100 80GB HBM3 MIG 1g.10gb')],
                         [(a.name, a.type, a.number, a.vendor, a.model)
                          for a in accels])


if __name__ == '__main__':
    sys.exit(testtools.run.main(sys.argv, sys.stdout))
