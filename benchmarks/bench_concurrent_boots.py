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

"""20 boots at once through nova's in-process cloud vs 20 raw launches.

One run, one daemon, one image: nova's real API, scheduler, conductor and
compute with this driver, real Placement, the real local LXD (through the
test proxy, which serves a host with 8 GPUs, 7 MIG slices and 8 IB VFs),
against 20 raw pylxd create+start of the same cached image in the same
LXD project, 20 threads at once. Both start from a warm image cache (one
server is booted and deleted first). Prints both wall times and the ratio
(cloud / raw)::

    LXD_DIR=/var/lib/lxd NOVA_LXD_ACCEL_TEST_IMAGE=.ci/state/tiny.tar.gz \\
        python benchmarks/bench_concurrent_boots.py [--servers 20] \\
        [--accel] [--max-concurrent-builds 10]

``--accel`` gives every server a MIG slice or an IB VF (so the claim path
runs); nothing is asserted.
"""

import argparse
import os
import re
import statistics
import sys
import threading
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))

ARGS = None


def _parse():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--servers', type=int, default=20)
    parser.add_argument('--accel', action='store_true')
    parser.add_argument('--max-concurrent-builds', type=int, default=10,
                        help="nova's own default is 10")
    parser.add_argument('--log', help="write nova's log of the run here")
    return parser.parse_args()


def _make_case():
    from tests.functional import test_claims

    class Bench(test_claims.ClaimTestBase):

        def test_bench(self):
            n = ARGS.servers
            self.flags(max_concurrent_builds=ARGS.max_concurrent_builds)
            # room for every server on this small host's VCPU inventory
            self.flags(cpu_allocation_ratio=float(max(16, 2 * n)))
            self._run_periodics()
            flavors = [self.flavor()]
            if ARGS.accel:
                flavors = [self.flavor(**{'resources:%s' % test_claims.MIG_RC:
                                          '1'}),
                           self.flavor(**{'resources:%s' % test_claims.VF_RC:
                                          '1'})]
            # warm: the image is imported into LXD once
            self._delete_server(self.wait_built(self.post(flavors[0])))
            alias = 'nova-image-%s' % self.image_id

            start = time.monotonic()
            servers = [self.post(flavors[i % len(flavors)])
                       for i in range(n)]
            final = [self.wait_built(s) for s in servers]
            cloud = time.monotonic() - start
            active = sum(1 for s in final if s['status'] == 'ACTIVE')
            for server in final:
                self._delete_server(server)

            api = self.lxd.client.api
            names = ['raw-%s' % uuid.uuid4().hex[:10] for _ in range(n)]

            def launch(name):
                self.lxd._wait(api.instances.post(json={
                    'name': name, 'type': 'container',
                    'source': {'type': 'image', 'alias': alias},
                    'config': {'limits.cpu': '1',
                               'limits.memory': '128MiB'}}))
                self.lxd._wait(api.instances[name].state.put(json={
                    'action': 'start'}))

            start = time.monotonic()
            threads = [threading.Thread(target=launch, args=(name,))
                       for name in names]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            raw = time.monotonic() - start
            out = sys.__stdout__
            out.write('%d servers through the cloud: %.1f s (%d ACTIVE, '
                      'max_concurrent_builds=%d%s)\n'
                      % (n, cloud, active, ARGS.max_concurrent_builds,
                         ', accelerators' if ARGS.accel else ''))
            out.write('%d raw create+start:          %.1f s\n' % (n, raw))
            out.write('ratio cloud/raw: %.2f\n' % (cloud / raw))
            log = self.stdlog.logger.output
            if ARGS.log:
                with open(ARGS.log, 'w') as handle:
                    handle.write(log)
            for what in ('spawn the instance on the hypervisor',
                         'build instance'):
                took = [float(x) for x in re.findall(
                    r'Took (\d+\.\d+) seconds to %s' % what, log)]
                if took:
                    out.write('nova "took ... to %s": mean %.1f s, max '
                              '%.1f s over %d\n'
                              % (what, statistics.mean(took), max(took),
                                 len(took)))
            faults = sorted({s['fault']['message'][:200] for s in final
                             if s['status'] == 'ERROR'})
            for fault in faults:
                out.write('fault: %s\n' % fault)
            out.flush()

    return Bench('test_bench')


def main():
    global ARGS
    ARGS = _parse()
    import testtools

    case = _make_case()
    result = testtools.TextTestResult(sys.stderr)
    result.startTestRun()
    case.run(result)
    result.stopTestRun()
    return 0 if result.wasSuccessful() else 1


if __name__ == '__main__':
    sys.exit(main())
