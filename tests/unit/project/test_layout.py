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

"""The package's imports run one way (doc/source/admin/code-layout.rst).

And the wiring imports cannot show (:class:`RuntimeWiringTest`).
"""

import ast
import importlib
import inspect
import os

import testtools

from nova_lxd_accel.accel.binding import claims
from nova_lxd_accel.accel import devices

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
PACKAGE = os.path.join(REPO, 'nova_lxd_accel')
UNIT_TESTS = os.path.join(REPO, 'tests', 'unit')
TESTS = os.path.join(REPO, 'tests')
# the suites whose test_*.py are test modules: they share set-up through
# tests/fixtures (and their base.py), never through each other
TEST_SUITES = ('unit', 'functional', 'integration')
# tests/unit folders that test something other than the package: the
# project as a whole, tools/, benchmarks/, the models that span several
# modules, the Horizon plugin (nova_lxd_accel_dashboard), recorded samples
NOT_MIRRORED = ('project', 'tools', 'benchmarks', 'models', 'dashboard',
                'samples')
# modules whose tests need what the unit venv cannot hold, and where they are
TESTED_ELSEWHERE = {
    # cASO pins oslo.concurrency < 7, nova needs 7: tox -e federation
    'nova_lxd_accel.accounting.caso_extractor':
        'tests/federation/test_caso_extractor.py',
}


#: What the package root holds besides its rooms (packages): the facade,
#: the parts it builds, the Host part, and the names every room shares.
ROOT = {
    'driver', 'parts', 'host', 'daemon', 'exception', 'nova_lookups',
    'placement_names',
    # the rooms
    'accel', 'accounting', 'advice', 'client', 'cmd', 'conf', 'container',
    'extra_specs', 'hostside', 'instance',
}
#: Rooms of the root and what each must never import: the host side is
#: below the instance's life, and neither reaches up to the facade, the
#: parts, the Host part or the command line.
_TOP = ('driver', 'parts', 'host', 'cmd', 'advice')
FORBIDDEN = {
    'hostside': ('instance',) + _TOP,
    'instance': _TOP,
    'container': ('instance', 'hostside') + _TOP,
    'accel': ('instance', 'hostside') + _TOP,
    'client': ('instance', 'hostside', 'accel') + _TOP,
}
#: Modules may grow to 500 lines; these are longer, each for its reason
#: (and none past 700).
MAX_LINES = 500
LONG_MODULES = {
    'nova_lxd_accel.accel.health.gate_state':
        'the state file: atomic durable writes, fail-closed reads and '
        'the migration of old formats, kept together',
    'nova_lxd_accel.accel.inventory.nvidia_smi':
        'every nvidia-smi query and its parser, and the reaper of the '
        'process that does not exit, in one place',
    'nova_lxd_accel.accel.inventory.reporter':
        'the inventory nova reports, from every source, in one pass',
    'nova_lxd_accel.advice.diagnosis':
        'each check of `doctor` is short; there are many',
    'nova_lxd_accel.host':
        "the Host part: the daemon's facts, the container policy, the "
        'daemon check and the root provider',
    'nova_lxd_accel.instance.lifecycle':
        'spawn to destroy, rescue and snapshot: one undo list per action',
    'nova_lxd_accel.instance.image_cache':
        'Glance to LXD and back, with the cache manager hooks',
    'nova_lxd_accel.container.builder':
        'the assembler: every filter of the chain has the same signature '
        'and reads best beside the others',
    'nova_lxd_accel.conf.accelerators':
        'option help text: one group, one module',
    'nova_lxd_accel.client.instances':
        "the seam's instance calls, with their error mapping and the "
        'creation lock',
}


def _room(module):
    """The room of the package root a module is in, or its root name."""
    parts = module.split('.')
    return parts[1] if len(parts) > 1 else parts[0]


def _modules():
    out = {}
    for folder, _dirs, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith('.py'):
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, os.path.dirname(PACKAGE))
                module = rel[:-3].replace(os.sep, '.')
                if module.endswith('.__init__'):
                    module = module[:-len('.__init__')]
                out[module] = path
    return out


def _imports(module, path, known):
    """The package modules ``module`` imports, at any depth of its code."""
    tree = ast.parse(open(path).read())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ''
            if node.level:
                parts = module.split('.')
                if not path.endswith('__init__.py'):
                    parts = parts[:-1]
                parts = parts[:len(parts) - node.level + 1]
                base = '.'.join(parts + ([base] if base else []))
            for alias in node.names:
                name = '%s.%s' % (base, alias.name)
                found.add(name if name in known else base)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name in known and name != module}


def _accel_room(module):
    """The room of accel/ a module is in ('root' for its own), or None."""
    parts = module.split('.')
    if parts[:2] != ['nova_lxd_accel', 'accel']:
        return None
    if len(parts) > 3 or (len(parts) == 3 and parts[2] in (
            'inventory', 'binding', 'health')):
        return parts[2]
    return 'root'


class LayoutTest(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.modules = _modules()
        self.graph = {m: _imports(m, p, self.modules)
                      for m, p in self.modules.items()}

    def test_no_import_circle(self):
        state, cycles = {}, []

        def visit(module, trail):
            state[module] = 'open'
            for dep in sorted(self.graph[module]):
                if state.get(dep) == 'open':
                    cycles.append(trail[trail.index(dep):] + [dep])
                elif dep not in state:
                    visit(dep, trail + [dep])
            state[module] = 'done'

        for module in sorted(self.graph):
            if module not in state:
                visit(module, [module])
        self.assertEqual([], cycles)

    def test_container_is_pure(self):
        # the container builder never reaches for the host side, the
        # daemon or nova's services: only its own leaves, the validation it
        # applies and the names they share
        allowed = ('nova_lxd_accel.container', 'nova_lxd_accel.exception',
                   'nova_lxd_accel.extra_specs',
                   'nova_lxd_accel.placement_names')
        for module, deps in self.graph.items():
            if module.startswith('nova_lxd_accel.container'):
                self.assertEqual(
                    set(), {d for d in deps if not d.startswith(allowed)},
                    module)

    def test_accel_is_three_rooms_over_a_root(self):
        rooms = {m.split('.')[2] for m in self.modules
                 if m.startswith('nova_lxd_accel.accel.') and
                 os.path.basename(self.modules[m]) == '__init__.py'}
        self.assertEqual({'inventory', 'binding', 'health'}, rooms)

    def test_accel_rooms_run_one_way(self):
        # inventory (what the host has) reads no other room; the pick and
        # the health checks read what the inventory reports; the root
        # (device types, unit keys) reads no room
        allowed = {'root': set(), 'inventory': {'root'},
                   'binding': {'root', 'inventory'},
                   'health': {'root', 'inventory'}}
        wrong = set()
        for module, deps in self.graph.items():
            room = _accel_room(module)
            if room is None:
                continue
            for dep in deps:
                other = _accel_room(dep)
                if other not in (None, room) and other not in allowed[room]:
                    wrong.add((module, dep))
        self.assertEqual(set(), wrong)

    def test_no_two_modules_share_a_name(self):
        seen = {}
        for module in self.modules:
            if module == 'nova_lxd_accel':
                continue
            seen.setdefault(module.rsplit('.', 1)[1], []).append(module)
        self.assertEqual({}, {n: m for n, m in seen.items() if len(m) > 1})

    def test_nova_conf_is_read_only_at_the_top(self):
        # configuration is passed in below the facade, its parts and the
        # command line: no module falls back to nova.conf.CONF
        top = ('nova_lxd_accel.driver', 'nova_lxd_accel.parts',
               'nova_lxd_accel.cmd')
        users = set()
        for module, path in self.modules.items():
            for node in ast.walk(ast.parse(open(path).read())):
                names = ([a.name for a in node.names]
                         if isinstance(node, ast.Import) else
                         ['%s.%s' % (node.module, a.name) for a in node.names]
                         if isinstance(node, ast.ImportFrom) else [])
                if 'nova.conf' in names and not module.startswith(top):
                    users.add(module)
        self.assertEqual(set(), users)

    def test_only_the_client_package_imports_the_daemon_library(self):
        users = set()
        for module, path in self.modules.items():
            tree = ast.parse(open(path).read())
            for node in ast.walk(tree):
                names = ([a.name for a in node.names]
                         if isinstance(node, ast.Import) else
                         [node.module or ''] if isinstance(
                             node, ast.ImportFrom) else [])
                if any(n.split('.')[0] == 'pylxd' for n in names):
                    users.add(module.split('.')[1])
        self.assertEqual({'client'}, users)

    def test_the_root_holds_the_facade_its_parts_and_shared_names(self):
        # everything else is in a room: the instance's life (instance/),
        # the host side (hostside/), what the CLI tells an operator
        # (advice/), the accelerators (accel/), ...
        root = {m.split('.')[1] for m in self.modules if m.count('.') == 1}
        self.assertEqual(ROOT, root)

    def test_rooms_at_the_root_run_one_way(self):
        wrong = set()
        for module, deps in self.graph.items():
            for dep in deps:
                if _room(dep) in FORBIDDEN.get(_room(module), ()):
                    wrong.add((module, dep))
        self.assertEqual(set(), wrong)

    def test_only_the_command_line_takes_advice(self):
        users = {module for module, deps in self.graph.items()
                 if _room(module) not in ('advice', 'cmd') and
                 any(_room(dep) == 'advice' for dep in deps)}
        self.assertEqual(set(), users)

    def test_no_module_over_500_lines_but_the_named_ones(self):
        lines = {m: sum(1 for _ in open(p)) for m, p in self.modules.items()}
        long = {m for m, n in lines.items() if n > MAX_LINES}
        self.assertEqual(set(), long - set(LONG_MODULES))
        # an entry that no longer needs its exception goes
        self.assertEqual(
            set(), {m for m in LONG_MODULES if lines.get(m, 0) <= MAX_LINES})
        self.assertEqual({}, {m: n for m, n in lines.items() if n > 700})


def _takes_the_gate(name):
    """Whether a parameter named ``name`` is a GPU gate."""
    return name == 'gate' or name.endswith('_gate') or \
        name.startswith('gate_')


def _callables(module):
    """(qualified name, callable) of each function and class of ``module``.

    Its classes' methods and the classes themselves (their constructors)
    included; only those defined in ``module``.
    """
    found = []
    for name, value in sorted(vars(module).items()):
        if getattr(value, '__module__', None) != module.__name__:
            continue
        if inspect.isfunction(value):
            found.append((name, value))
        elif inspect.isclass(value):
            found.append((name, value))
            for attr, member in sorted(vars(value).items()):
                if inspect.isfunction(member) and attr != '__init__':
                    found.append(('%s.%s' % (name, attr), member))
    return found


class RuntimeWiringTest(testtools.TestCase):
    """What is handed to whom at run time, which imports cannot show.

    ``parts.py`` wires the parts with objects, not imports: the inventory
    could be handed the gate without importing ``health/``.
    """

    def test_nothing_in_the_inventory_takes_the_gate(self):
        # the driver applies the gate where it writes the provider tree
        # and the claim asks it whether a device may be bound: the
        # inventory reads neither binding nor health at run time
        inventory = sorted(m for m in _modules()
                           if _accel_room(m) == 'inventory')
        self.assertIn('nova_lxd_accel.accel.inventory.reporter', inventory)
        taking = []
        for name in inventory:
            module = importlib.import_module(name)
            for qualname, value in _callables(module):
                try:
                    params = inspect.signature(value).parameters
                except ValueError:
                    continue
                taking.extend('%s.%s(%s)' % (name, qualname, p)
                              for p in params if _takes_the_gate(p))
        self.assertEqual([], taking)

    def test_the_claim_takes_the_reported_devices_whole(self):
        # one typed object (devices.ReportedDevices), not its methods as
        # loose callables
        params = inspect.signature(claims.Claims).parameters
        seam = devices.ReportedDevices
        loose = {n for n in vars(seam) if not n.startswith('_')} | {
            'host_devices'}
        self.assertEqual(set(), loose & set(params))
        self.assertEqual(
            1, [p.annotation for p in params.values()].count(seam))


def _unit_test_modules():
    """Paths of tests/unit's test modules mirroring the package, relative."""
    found = set()
    for folder, dirs, files in os.walk(UNIT_TESTS):
        rel = os.path.relpath(folder, UNIT_TESTS)
        if rel.split(os.sep)[0] in NOT_MIRRORED:
            dirs[:] = []
            continue
        found.update(os.path.normpath(os.path.join(rel, name))
                     for name in files
                     if name.startswith('test_') and name.endswith('.py'))
    return found


def _mirror(module):
    """tests/unit's test module of a package module, relative."""
    parts = module.split('.')[1:]
    return os.path.join(*(parts[:-1] + ['test_%s.py' % parts[-1]]))


class MirrorTest(testtools.TestCase):
    """Unit tests mirror the package: one test module per module."""

    def setUp(self):
        super().setUp()
        self.modules = {m for m, p in _modules().items()
                        if os.path.basename(p) != '__init__.py'}

    def test_every_module_has_its_test_module(self):
        tests = _unit_test_modules()
        self.assertEqual(
            [], sorted(m for m in self.modules if _mirror(m) not in tests and
                       m not in TESTED_ELSEWHERE))

    def test_modules_tested_elsewhere_are(self):
        for module, path in TESTED_ELSEWHERE.items():
            self.assertIn(module, self.modules)
            self.assertTrue(os.path.isfile(os.path.join(REPO, path)), path)

    def test_every_test_module_tests_a_module(self):
        mirrors = {_mirror(m) for m in self.modules}
        self.assertEqual([], sorted(_unit_test_modules() - mirrors))


def _tests_modules():
    """{dotted name: path} of every module under tests/."""
    out = {}
    for folder, dirs, files in os.walk(TESTS):
        dirs[:] = [d for d in dirs if not d.startswith(('.', '_'))]
        for name in files:
            if name.endswith('.py'):
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, REPO)[:-3]
                module = rel.replace(os.sep, '.')
                if module.endswith('.__init__'):
                    module = module[:-len('.__init__')]
                out[module] = path
    return out


def _is_test_module(module):
    parts = module.split('.')
    return (len(parts) > 2 and parts[1] in TEST_SUITES and
            parts[-1].startswith('test_'))


class TestModulesStandAloneTest(testtools.TestCase):
    """No test module is imported by another: shared set-up is a fixture.

    A test module imported elsewhere couples two suites' tests (a change
    to one breaks the other) and a base class with test methods imported
    into a module is collected and run there a second time.
    """

    def test_no_test_module_is_imported_by_another_module(self):
        modules = _tests_modules()
        found = set()
        for module, path in modules.items():
            for imported in _imports(module, path, modules):
                if _is_test_module(imported):
                    found.add((module, imported))
        self.assertEqual(set(), found)

    def test_the_rule_sees_the_suites_test_modules(self):
        # guards the rule above against reading nothing
        test_modules = {m for m in _tests_modules() if _is_test_module(m)}
        for suite in TEST_SUITES:
            self.assertTrue(any(m.startswith('tests.%s.' % suite)
                                for m in test_modules), suite)
        self.assertIn('tests.unit.cmd.test_gpu', test_modules)
        self.assertNotIn('tests.fixtures.gpu_hosts', test_modules)
