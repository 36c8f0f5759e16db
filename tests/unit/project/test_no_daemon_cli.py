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

"""Tests never run the lxc or incus command line clients.

The same suites run against LXD and Incus; a host may have only one of the
two clients. Tests use the API: pylxd, or tests/lxd_fixtures.execute for
commands inside a container.
"""

import ast
import os

import testtools

TESTS = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
CLIENTS = ('lxc', 'incus')


def _cli_calls(path):
    """(line, client) of every list or tuple literal starting with one."""
    with open(path) as handle:
        tree = ast.parse(handle.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, (ast.List, ast.Tuple)) and node.elts:
            first = node.elts[0]
            if (isinstance(first, ast.Constant) and first.value in CLIENTS
                    and len(node.elts) > 1):
                yield node.lineno, first.value


class NoDaemonCLITest(testtools.TestCase):

    def test_no_test_runs_lxc_or_incus(self):
        found = []
        for directory in ('functional', 'integration'):
            root = os.path.join(TESTS, directory)
            for name in sorted(os.listdir(root)):
                if name.endswith('.py'):
                    path = os.path.join(root, name)
                    found += ['%s:%d runs %s' % (
                        os.path.relpath(path, TESTS), line, client)
                        for line, client in _cli_calls(path)]
        self.assertEqual([], found, 'use pylxd or lxd_fixtures.execute')
