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

"""tools/subid-ranges.py on the /etc/subuid and /etc/subgid that Debian's
lxd and incus packages leave, in either order of installation."""

import os
import subprocess
import sys

import fixtures
import testtools

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__))))), 'tools', 'subid-ranges.py')

# What the packages' maintainer scripts write (lxd.preinst, incus.postinst).
LXD_THEN_INCUS = '_lxd:100000:10000001\nroot:100000:10000001\n'
INCUS_THEN_LXD = ('root:1000000:1000000001\n_lxd:1001000000:10000001\n'
                  'root:1001000000:10000001\n')


def ranges(text):
    return [tuple(int(f) if f.isdigit() else f for f in line.split(':'))
            for line in text.splitlines() if line]


class SubidRangesTest(testtools.TestCase):

    def setUp(self):
        super(SubidRangesTest, self).setUp()
        self.etc = self.useFixture(fixtures.TempDir()).path
        self.incus = os.path.join(self.etc, 'incus-idmap')

    def write(self, text):
        for kind in ('subuid', 'subgid'):
            with open(os.path.join(self.etc, kind), 'w') as handle:
                handle.write(text)

    def read(self, *path):
        with open(os.path.join(self.etc, *path)) as handle:
            return handle.read()

    def run_script(self, *args):
        return subprocess.run(
            [sys.executable, SCRIPT, '--etc', self.etc] + list(args),
            capture_output=True, text=True, check=True).stdout

    def assert_apart(self):
        for kind in ('subuid', 'subgid'):
            host = ranges(self.read(kind))
            roots = [r for r in host if r[0] == 'root']
            self.assertEqual(1, len(roots), host)
            incus = ranges(self.read('incus-idmap', kind))
            self.assertEqual(1, len(incus))
            _, start, count = incus[0]
            self.assertGreaterEqual(count, 65536)
            self.assertLess(start + count, 2 ** 32)
            for _, s, c in host:
                self.assertFalse(start < s + c and s < start + count,
                                 (incus, host))

    def test_lxd_then_incus_gives_incus_its_own_range(self):
        self.write(LXD_THEN_INCUS)
        self.run_script(self.incus)
        self.assertEqual(LXD_THEN_INCUS, self.read('subuid'))
        self.assert_apart()

    def test_incus_then_lxd_keeps_the_lxd_root_range_only(self):
        self.write(INCUS_THEN_LXD)
        out = self.run_script(self.incus)
        self.assertIn('removed root:1000000:1000000001', out)
        self.assertEqual('_lxd:1001000000:10000001\nroot:1001000000:10000001'
                         '\n', self.read('subuid'))
        self.assert_apart()

    def test_idempotent(self):
        self.write(INCUS_THEN_LXD)
        self.run_script(self.incus)
        before = [self.read('subuid'), self.read('incus-idmap', 'subuid')]
        self.assertEqual('', self.run_script(self.incus))
        self.assertEqual(before, [self.read('subuid'),
                                  self.read('incus-idmap', 'subuid')])

    def test_host_only_leaves_one_root_range(self):
        self.write(INCUS_THEN_LXD)
        self.run_script('--host-only')
        self.assertEqual(1, self.read('subgid').count('root:'))
        self.assertFalse(os.path.exists(self.incus))

    def test_an_overlapping_incus_range_is_replaced(self):
        self.write(LXD_THEN_INCUS)
        os.makedirs(self.incus)
        for kind in ('subuid', 'subgid'):
            with open(os.path.join(self.incus, kind), 'w') as handle:
                handle.write('root:100000:65536\n')
        self.run_script(self.incus)
        self.assert_apart()
