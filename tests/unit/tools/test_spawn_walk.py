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

"""tools/spawn_walk.py on a small package written for the test."""

import importlib
import os
import sys
import textwrap

import fixtures
import testtools

from tools import spawn_walk

MODULES = {
    '__init__': '',
    'facade': '''
        from walkpkg import part
        from walkpkg import seam


        class Facade(object):
            def spawn(self, lookup):
                self._local()
                part.Part().build(lookup)
                return seam.create('x')

            def _local(self):
                return 1


        def elsewhere():
            return part.Part().build(None)
        ''',
    'part': '''
        from walkpkg import seam


        class Part(object):
            def build(self, lookup):
                if lookup is not None:
                    lookup('k')
                return seam.create('y')
        ''',
    'seam': '''
        import functools


        def logged(method):
            @functools.wraps(method)
            def wrapper(*args, **kwargs):
                return method(*args, **kwargs)
            return wrapper


        @logged
        def create(name):
            return name


        def find(key):
            return create(key)
        ''',
}


class WalkTest(testtools.TestCase):

    def setUp(self):
        super().setUp()
        root = self.useFixture(fixtures.TempDir()).path
        os.mkdir(os.path.join(root, 'walkpkg'))
        for name, text in MODULES.items():
            with open(os.path.join(root, 'walkpkg', name + '.py'), 'w') as f:
                f.write(textwrap.dedent(text))
        self.useFixture(fixtures.MonkeyPatch('sys.path', [root] + sys.path))
        self.addCleanup(self._forget)
        self.facade = importlib.import_module('walkpkg.facade')
        self.seam = importlib.import_module('walkpkg.seam')

    @staticmethod
    def _forget():
        for name in [n for n in sys.modules if n.startswith('walkpkg')]:
            del sys.modules[name]

    def walk(self, lookup):
        walk = spawn_walk.Walk('walkpkg', 'Facade.spawn',
                               target='seam.create')
        with walk:
            self.facade.elsewhere()         # not under the root
            self.facade.Facade().spawn(lookup)
        return walk

    def test_crossings_under_the_root_only_in_order(self):
        walk = self.walk(None)
        self.assertEqual(
            [('facade.Facade.spawn', 'part.Part.build'),
             ('part.Part.build', 'seam.logged.<locals>.wrapper'),
             ('facade.Facade.spawn', 'seam.logged.<locals>.wrapper')],
            [(h.caller.replace('walkpkg.', ''),
              h.callee.replace('walkpkg.', '')) for h in walk.hops])
        self.assertEqual({'walkpkg.facade', 'walkpkg.part', 'walkpkg.seam'},
                         walk.modules())
        self.assertEqual(1, walk.returns_to('walkpkg.facade'))
        self.assertIn('3 calls across a module boundary, through 3 modules',
                      walk.report())

    def test_the_chain_to_the_target_each_hop_named(self):
        walk = self.walk(None)
        # through create's decorator: named by create, which it wraps
        self.assertEqual(['part.Part.build', 'seam.logged.<locals>.wrapper',
                          'seam.create'],
                         [h.callee.replace('walkpkg.', '')
                          for h in walk.chain()])
        self.assertEqual([], walk.unnamed_hops())

    def test_a_callable_handed_in_is_a_hop_no_editor_follows(self):
        # part calls seam.find through ``lookup``: its site names "lookup"
        walk = self.walk(self.seam.find)
        self.assertEqual(['part.Part.build', 'seam.find',
                          'seam.logged.<locals>.wrapper', 'seam.create'],
                         [h.callee.replace('walkpkg.', '')
                          for h in walk.chain()])
        unnamed = walk.unnamed_hops()
        self.assertEqual(['walkpkg.seam.find'], [h.callee for h in unnamed])
        self.assertIn("lookup('k')", unnamed[0].site)
        self.assertIn('1 of them not named at their call site',
                      walk.report())

    def test_the_previous_profile_is_put_back(self):
        before = sys.getprofile()
        with spawn_walk.Walk('walkpkg', 'Facade.spawn'):
            self.assertIsNotNone(sys.getprofile())
        self.assertIs(before, sys.getprofile())
