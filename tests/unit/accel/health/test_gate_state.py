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

"""The GPU state file and the pure functions over it (:mod:`.gate_state`).

``test_gate`` drives the state through the gate (holds, releases, idle
units); here the file itself (missing, old, broken, locked, atomic), the
holds nova-compute makes, the operator's ``forget``, the release marks
that keep a stale listing from binding a unit again, and the state each
GPU is reported in, on a real file in a temporary directory.
"""

import fcntl
import json
import os
import stat

import fixtures
from oslo_config import cfg
import testtools

from nova_lxd_accel.accel.health import gate_state
from nova_lxd_accel.conf import accelerators
from tests.fixtures import gpu_hosts

GPU = '0000:00:09.0'
INSTANCE = 'f0d1c2b3-0000-4000-8000-000000000001'


def _refusing_open(refused):
    real_open = open

    def refusing_open(path, *args, **kwargs):
        if path == refused:
            raise PermissionError(13, 'Permission denied', path)
        return real_open(path, *args, **kwargs)
    return refusing_open


class StoreTestCase(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(fixtures.TempDir()).path
        self.store = gate_state.StateStore(os.path.join(self.dir, 'state'))

    def write(self, text):
        os.makedirs(self.store.directory, exist_ok=True)
        with open(self.store.path, 'w') as f:
            f.write(text)


class TestLoad(StoreTestCase):

    def test_no_file_yet_is_an_empty_state_and_creates_nothing(self):
        self.assertEqual(gate_state.empty_state(), self.store.load())
        self.assertFalse(os.path.exists(self.store.directory))

    def test_keys_missing_from_an_older_file_are_filled_in(self):
        self.write(json.dumps({'holds': {GPU: {'kind': 'operator'}}}))
        state = self.store.load()
        self.assertEqual({GPU: {'kind': 'operator'}}, state['holds'])
        self.assertEqual(({}, [], 0), (state['dirty'], state['events'],
                                       state['seq']))

    def test_a_broken_file_is_named_in_the_error(self):
        self.write('{"holds": ')
        error = self.assertRaises(ValueError, self.store.load)
        self.assertIn('%s is not valid JSON' % self.store.path, str(error))

    def test_json_of_another_shape_is_refused_not_read_as_empty(self):
        # read as an empty state, the operator's holds and the units
        # waiting for verification would be gone
        for text, problem in (
                ('[1, 2]', 'a JSON list, not an object'),
                ('{"holds": []}', "'holds' is a JSON list, not an object"),
                ('{"dirty": {"pci:0000:00:09.0": "x"}}',
                 "'pci:0000:00:09.0' of 'dirty' is a JSON str"),
                ('{"events": {}}', "'events' is not a list"),
                ('{"seq": "7"}', "'seq' is not a whole number")):
            self.write(text)
            error = self.assertRaises(ValueError, self.store.load)
            self.assertIn('%s is not a GPU state file: %s'
                          % (self.store.path, problem), str(error))

    def test_a_truncated_file_is_unreadable_not_empty(self):
        # a crash before the data reached the disk: empty or cut short
        for text in ('', '{"holds": {"0000:00:09.0": {"kind": "oper'):
            self.write(text)
            error = self.assertRaises(gate_state.StateUnreadable,
                                      self.store.load)
            self.assertEqual(self.store.path, error.path)
            self.assertIn('is not valid JSON', error.reason)
            self.assertFalse(error.io_error)

    def test_a_file_that_cannot_be_read_is_unreadable_not_empty(self):
        # e.g. mode 0600, owned by root after a root-run command
        self.write('{}')
        self.useFixture(fixtures.MonkeyPatch(
            'builtins.open', _refusing_open(self.store.path)))
        error = self.assertRaises(gate_state.StateUnreadable,
                                  self.store.load)
        self.assertEqual(self.store.path, error.path)
        self.assertIn('cannot be read', error.reason)
        self.assertIn('Permission denied', str(error))
        self.assertTrue(error.io_error)

    def test_another_shape_is_unreadable_too(self):
        self.write('[]')
        error = self.assertRaises(gate_state.StateUnreadable,
                                  self.store.load)
        self.assertIn('a JSON list, not an object', error.reason)

    def test_from_conf_uses_the_state_dir(self):
        conf = gpu_hosts.make_conf(state_dir=self.dir)
        self.assertEqual(os.path.join(self.dir, 'gpu-state.json'),
                         gate_state.StateStore.from_conf(conf).path)


class TestUpdate(StoreTestCase):

    def test_the_lock_is_held_for_the_whole_block(self):
        lock_path = os.path.join(self.store.directory, gate_state.LOCK_FILE)
        with self.store.update():
            with open(lock_path, 'a') as other:
                self.assertRaises(BlockingIOError, fcntl.flock, other,
                                  fcntl.LOCK_EX | fcntl.LOCK_NB)
        with open(lock_path, 'a') as other:
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(other, fcntl.LOCK_UN)

    def test_only_the_last_events_are_kept(self):
        with self.store.update() as state:
            for n in range(gate_state.MAX_EVENTS + 5):
                gate_state.add_event(state, 'hold', GPU, 'r%d' % n, now=n)
        events = self.store.load()['events']
        self.assertEqual(gate_state.MAX_EVENTS, len(events))
        self.assertEqual(('r5', 'r%d' % (gate_state.MAX_EVENTS + 4)),
                         (events[0]['reason'], events[-1]['reason']))

    def test_a_lock_file_that_is_a_link_is_refused(self):
        # the commands run as root: a planted link is never followed
        os.makedirs(self.store.directory)
        target = os.path.join(self.dir, 'elsewhere')
        os.symlink(target, os.path.join(self.store.directory,
                                        gate_state.LOCK_FILE))
        self.assertRaises(OSError, gate_state.hold, self.store, GPU, 'x')
        self.assertFalse(os.path.exists(target))
        self.assertFalse(os.path.exists(self.store.path))

    def test_a_rewrite_keeps_the_file_s_owner_and_mode(self):
        gate_state.hold(self.store, GPU, 'fan', now=1)
        os.chmod(self.store.path, 0o640)
        calls = []
        self.useFixture(fixtures.MonkeyPatch(
            'os.fchown', lambda fd, uid, gid: calls.append((uid, gid))))
        # as root, a file nova-compute owns is given back to it
        self.useFixture(fixtures.MonkeyPatch('os.geteuid', lambda: 0))
        self.useFixture(fixtures.MonkeyPatch('os.getegid', lambda: 0))
        real_stat = os.stat

        def owned_by_nova(path, *args, **kwargs):
            result = real_stat(path, *args, **kwargs)
            if path == self.store.path:
                return os.stat_result((result.st_mode, result.st_ino,
                                       result.st_dev, result.st_nlink, 64060,
                                       64061) + tuple(result)[6:])
            return result
        self.useFixture(fixtures.MonkeyPatch('os.stat', owned_by_nova))
        gate_state.release(self.store, GPU, 'fixed', now=2)
        self.assertEqual([(64060, 64061)], calls)
        self.assertEqual(0o640,
                         stat.S_IMODE(real_stat(self.store.path).st_mode))

    def test_a_first_file_takes_the_directory_s_owner(self):
        os.makedirs(self.store.directory)
        os.chmod(self.store.directory, 0o750)
        gate_state.hold(self.store, GPU, 'fan', now=1)
        # not mkstemp's 0600: nova-compute and the exporters read it
        self.assertEqual(0o644,
                         stat.S_IMODE(os.stat(self.store.path).st_mode))
        self.assertEqual(os.stat(self.store.directory).st_uid,
                         os.stat(self.store.path).st_uid)

    def test_writes_leave_no_temporary_file(self):
        gate_state.hold(self.store, GPU, 'fan', now=1)
        gate_state.release(self.store, GPU, 'fixed', now=2)
        self.assertEqual(sorted([gate_state.STATE_FILE,
                                 gate_state.LOCK_FILE]),
                         sorted(os.listdir(self.store.directory)))


class TestDurableWrites(StoreTestCase):
    """The data and the rename are on the disk before a write returns."""

    def setUp(self):
        super().setUp()
        self.synced = []
        real_fsync = os.fsync

        def fsync(fd):
            target = os.readlink('/proc/self/fd/%d' % fd)
            self.synced.append(target)
            real_fsync(fd)
        self.useFixture(fixtures.MonkeyPatch('os.fsync', fsync))
        real_replace = os.replace

        def replace(src, dst):
            self.synced.append(('replace', dst))
            real_replace(src, dst)
        self.useFixture(fixtures.MonkeyPatch('os.replace', replace))

    def test_the_file_then_its_directory_are_synced(self):
        gate_state.hold(self.store, GPU, 'fan', now=1)
        replaced = self.synced.index(('replace', self.store.path))
        before, after = self.synced[:replaced], self.synced[replaced + 1:]
        # the temporary file, under its own name, before the rename
        self.assertTrue(any(os.path.basename(p).startswith('.gpu-state.')
                            for p in before), before)
        self.assertEqual([os.path.realpath(self.store.directory)], after)

    def test_a_root_made_lock_file_is_given_to_the_directory_s_owner(self):
        # a root-run command made the lock file first: nova-compute (the
        # directory's owner) must still open it for writing
        os.makedirs(self.store.directory)
        given = []
        self.useFixture(fixtures.MonkeyPatch(
            'os.fchown', lambda fd, uid, gid: given.append((
                os.path.basename(os.readlink('/proc/self/fd/%d' % fd)),
                uid, gid))))
        self.useFixture(fixtures.MonkeyPatch('os.geteuid', lambda: 0))
        self.useFixture(fixtures.MonkeyPatch('os.getegid', lambda: 0))
        real_stat, real_fstat = os.stat, os.fstat

        def owned_by(result, uid, gid):
            fields = list(result)
            fields[4:6] = uid, gid
            return os.stat_result(fields, {
                name: getattr(result, name) for name in (
                    'st_atime', 'st_mtime', 'st_ctime', 'st_blksize',
                    'st_blocks', 'st_rdev')})

        def directory_of_nova(path, *args, **kwargs):
            result = real_stat(path, *args, **kwargs)
            if path == self.store.directory:
                return owned_by(result, 64060, 64061)
            return result
        self.useFixture(fixtures.MonkeyPatch('os.stat', directory_of_nova))
        self.useFixture(fixtures.MonkeyPatch(
            'os.fstat', lambda fd: owned_by(real_fstat(fd), 0, 0)))
        gate_state.hold(self.store, GPU, 'fan', now=1)
        self.assertIn((gate_state.LOCK_FILE, 64060, 64061), given)


class TestWriteAtomic(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(fixtures.TempDir()).path
        self.path = os.path.join(self.dir, 'gpu.prom')

    def test_replaces_the_file_with_the_mode_asked(self):
        gate_state.write_atomic(self.path, 'old\n', prefix='.t.')
        gate_state.write_atomic(self.path, 'new\n', prefix='.t.',
                                mode=0o644)
        with open(self.path) as f:
            self.assertEqual('new\n', f.read())
        self.assertEqual(0o644, stat.S_IMODE(os.stat(self.path).st_mode))
        self.assertEqual(['gpu.prom'], os.listdir(self.dir))

    def test_a_failed_write_keeps_the_old_file_and_leaves_nothing(self):
        gate_state.write_atomic(self.path, 'old\n', prefix='.t.')
        self.assertRaises(TypeError, gate_state.write_atomic, self.path,
                          None, prefix='.t.')
        with open(self.path) as f:
            self.assertEqual('old\n', f.read())
        self.assertEqual(['gpu.prom'], os.listdir(self.dir))


class TestComputeHoldsAndForget(StoreTestCase):

    def test_a_compute_hold_keeps_its_first_time_and_one_event(self):
        state = gate_state.empty_state()
        self.assertTrue(gate_state.hold_by_compute(
            state, GPU, gate_state.KIND_UNHEALTHY, 'ecc', now=10))
        self.assertFalse(gate_state.hold_by_compute(
            state, GPU, gate_state.KIND_UNHEALTHY, 'ecc; xid 79', now=20))
        self.assertEqual(
            {'kind': 'unhealthy', 'reason': 'ecc; xid 79', 'since': 10,
             'by': gate_state.BY_COMPUTE}, state['holds'][GPU])
        self.assertEqual([('hold', 10)], [(e['event'], e['at'])
                                          for e in state['events']])

    def test_a_gone_gpu_stays_gone_while_held(self):
        state = gate_state.empty_state()
        gate_state.hold_by_compute(state, GPU, gate_state.KIND_UNHEALTHY,
                                   'lost', now=10, gone=True)
        gate_state.hold_by_compute(state, GPU, gate_state.KIND_UNHEALTHY,
                                   'lost', now=20)
        self.assertTrue(state['holds'][GPU]['gone'])

    def test_forget_drops_a_dirty_unit_and_says_what_held_it(self):
        with self.store.update() as state:
            state['dirty']['pci:' + GPU] = {
                'pci': GPU, 'instance': INSTANCE,
                'holding': 'python3 (pid 7, 100 MiB)'}
        entry = gate_state.forget(self.store, 'pci:' + GPU, 'checked',
                                  by='admin', now=5)
        self.assertEqual(INSTANCE, entry['instance'])
        state = self.store.load()
        self.assertEqual({}, state['dirty'])
        self.assertEqual(
            {'at': 5, 'event': 'forget', 'pci': GPU, 'reason': 'checked',
             'unit': 'pci:' + GPU, 'by': 'admin',
             'holding': 'python3 (pid 7, 100 MiB)'}, state['events'][-1])

    def dirty_unit(self):
        with self.store.update() as state:
            state['dirty']['pci:' + GPU] = {
                'pci': GPU, 'instance': INSTANCE, 'seq': 3,
                'holding': 'python3 (pid 7, 100 MiB)'}

    def audit_lines(self):
        with open(self.store.audit_path) as f:
            return [json.loads(line) for line in f]

    def test_forget_appends_a_durable_audit_line(self):
        self.dirty_unit()
        synced = []
        real_fsync = os.fsync

        def fsync(fd):
            synced.append(os.readlink('/proc/self/fd/%d' % fd))
            real_fsync(fd)
        self.useFixture(fixtures.MonkeyPatch('os.fsync', fsync))
        gate_state.forget(self.store, 'pci:' + GPU, 'reset by hand',
                          by='alice', now=5,
                          audit={'run_as': 'root', 'uid': 0})
        self.assertEqual(
            [{'at': 5, 'action': 'forget', 'unit': 'pci:' + GPU,
              'pci': GPU, 'by': 'alice', 'reason': 'reset by hand',
              'run_as': 'root', 'uid': 0,
              'entry': {'pci': GPU, 'instance': INSTANCE, 'seq': 3,
                        'holding': 'python3 (pid 7, 100 MiB)'}}],
            self.audit_lines())
        self.assertIn(os.path.realpath(self.store.audit_path), synced)
        # appended to, never rewritten
        self.dirty_unit()
        gate_state.forget(self.store, 'pci:' + GPU, 'again', by='bob',
                          now=6)
        self.assertEqual(['alice', 'bob'],
                         [line['by'] for line in self.audit_lines()])

    def test_the_audit_file_keeps_its_mode_and_starts_with_the_state_s(self):
        self.dirty_unit()
        os.chmod(self.store.path, 0o640)
        gate_state.forget(self.store, 'pci:' + GPU, 'x', now=5)
        self.assertEqual(0o640, stat.S_IMODE(
            os.stat(self.store.audit_path).st_mode))
        os.chmod(self.store.audit_path, 0o600)
        self.dirty_unit()
        gate_state.forget(self.store, 'pci:' + GPU, 'x', now=6)
        self.assertEqual(0o600, stat.S_IMODE(
            os.stat(self.store.audit_path).st_mode))

    def test_no_entry_is_dropped_without_its_audit_line(self):
        self.dirty_unit()

        def full_disk(record):
            raise OSError(28, 'No space left on device')
        self.useFixture(fixtures.MonkeyPatch(
            'nova_lxd_accel.accel.health.gate_state.StateStore.append_audit',
            lambda store, record: full_disk(record)))
        self.assertRaises(OSError, gate_state.forget, self.store,
                          'pci:' + GPU, 'x')
        self.assertIn('pci:' + GPU, self.store.load()['dirty'])

    def test_forget_of_a_unit_not_dirty_records_nothing(self):
        self.assertIsNone(gate_state.forget(self.store, 'pci:' + GPU, 'x'))
        self.assertEqual([], self.store.load()['events'])


class TestUsagePruning(StoreTestCase):

    def setUp(self):
        super().setUp()
        self.now = 10 * 86400.0
        self.store = gate_state.StateStore(
            self.store.directory, usage_retention=86400,
            clock=lambda: self.now)

    def test_old_records_of_released_units_are_pruned_at_a_write(self):
        old, recent = self.now - 86400 - 1, self.now - 60
        with self.store.update() as state:
            state['bound'] = {'pci:b': {'instance': 'running'}}
            state['usage'] = {
                'gone': {'project': 'p', 'units': {
                    'pci:a': {'first': 0, 'last': old}}},
                'moved': {'project': 'p', 'units': {
                    'pci:a': {'first': 0, 'last': old},
                    'pci:c': {'first': 0, 'last': recent}}},
                # bound still: its record is accounted at the next probe
                'running': {'project': 'p', 'units': {
                    'pci:b': {'first': 0, 'last': old}}}}
        usage = self.store.load()['usage']
        self.assertEqual({'moved': ['pci:c'], 'running': ['pci:b']},
                         {i: sorted(u['units']) for i, u in usage.items()})

    def test_from_conf_keeps_ninety_days_and_zero_keeps_all(self):
        conf = cfg.ConfigOpts()
        accelerators.register_opts(conf)
        conf([])
        self.assertEqual(90 * 86400,
                         gate_state.StateStore.from_conf(conf)
                         .usage_retention)
        keep_all = gate_state.StateStore(self.store.directory)
        with keep_all.update() as state:
            state['usage'] = {'i': {'units': {'pci:a': {'last': 1}}}}
        self.assertIn('i', keep_all.load()['usage'])

    def test_prune_usage_says_what_it_dropped(self):
        state = {'bound': {}, 'usage': {'i': {'units': {
            'pci:a': {'last': 1}, 'pci:b': {'first': 1},
            'pci:c': {}}}}}
        self.assertEqual(['i/pci:a', 'i/pci:b'],
                         gate_state.prune_usage(state, 1000, 100))
        # a record with no time at all is kept: its age is not known
        self.assertEqual({'pci:c': {}}, state['usage']['i']['units'])


class TestReleaseMarks(testtools.TestCase):

    KEY = 'pci:' + GPU

    def test_a_binding_listed_before_the_release_is_stale(self):
        state = gate_state.empty_state()
        before = gate_state.next_seq(state)
        gate_state.note_released(state, self.KEY, 100.0, container='nova-a')
        self.assertEqual(before + 1, gate_state.released_seq(state,
                                                             self.KEY))
        self.assertTrue(gate_state.stale_binding(state, self.KEY, 'nova-a',
                                                 before))
        # the listing alone (no seq) predates any recorded release
        self.assertTrue(gate_state.stale_binding(state, self.KEY, 'nova-a'))
        after = gate_state.next_seq(state)
        self.assertFalse(gate_state.stale_binding(state, self.KEY, 'nova-a',
                                                  after))

    def test_another_container_may_take_the_released_unit(self):
        state = gate_state.empty_state()
        gate_state.note_released(state, self.KEY, 100.0, container='nova-a')
        self.assertFalse(gate_state.stale_binding(state, self.KEY,
                                                  'nova-b'))

    def test_a_unit_never_released_has_no_mark(self):
        state = gate_state.empty_state()
        self.assertEqual(0, gate_state.released_seq(state, self.KEY))
        self.assertFalse(gate_state.stale_binding(state, self.KEY, 'nova-a'))

    def test_old_marks_are_forgotten(self):
        state = gate_state.empty_state()
        gate_state.note_released(state, 'pci:old', 100.0, 'nova-a')
        gate_state.note_released(state, self.KEY, 500.0, 'nova-b')
        gate_state.forget_old_releases(
            state, 100.0 + gate_state.RELEASED_KEPT)
        self.assertEqual([self.KEY], list(state['released']))


def bound(pci, since, last_busy=None, running=True, instance=INSTANCE):
    return {'pci': pci, 'instance': instance, 'project': 'proj-a',
            'resource_class': 'PGPU', 'since': since,
            'last_busy': last_busy, 'running': running}


class TestIdleUnits(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.conf = gpu_hosts.make_conf(idle_report_after=3600)

    def test_idle_counted_from_the_last_use_else_the_binding(self):
        state = gate_state.empty_state()
        state['bound'] = {'pci:a': bound('a', since=1000, last_busy=5000),
                          'pci:b': bound('b', since=1000)}
        self.assertEqual(
            [('pci:b', 1000, 7000)],
            [(u['unit'], u['idle_since'], u['idle_s'])
             for u in gate_state.idle_units(state, self.conf, 8000)])
        self.assertEqual(['pci:a', 'pci:b'],
                         [u['unit'] for u in gate_state.idle_units(
                             state, self.conf, 8600)])

    def test_a_stopped_instance_is_not_idle(self):
        state = gate_state.empty_state()
        state['bound'] = {'pci:a': bound('a', since=1000, running=False)}
        self.assertEqual([], gate_state.idle_units(state, self.conf, 9999))

    def test_zero_turns_the_report_off_and_after_overrides_it(self):
        state = gate_state.empty_state()
        state['bound'] = {'pci:a': bound('a', since=1000)}
        conf = gpu_hosts.make_conf(idle_report_after=0)
        self.assertEqual([], gate_state.idle_units(state, conf, 10 ** 6))
        self.assertEqual(['pci:a'], [u['unit'] for u in gate_state.idle_units(
            state, conf, 1060, after=60)])


class TestGpuStates(testtools.TestCase):

    def test_worst_state_wins(self):
        conf = gpu_hosts.make_conf(idle_report_after=3600)
        state = gate_state.empty_state()
        state['holds'] = {
            'gone': {'kind': 'unhealthy', 'gone': True},
            'sick': {'kind': 'unhealthy'},
            'held': {'kind': 'operator'},
            'unprobeable': {'kind': 'unprobeable'}}
        state['bound'] = {
            'pci:sick': bound('sick', since=1000),
            'pci:dirty': bound('dirty', since=1000),
            'pci:idle': bound('idle', since=1000),
            'pci:bound': bound('bound', since=9000)}
        state['dirty'] = {'pci:dirty': {'pci': 'dirty'}}
        pcis = ['gone', 'sick', 'held', 'unprobeable', 'dirty', 'idle',
                'bound', 'free']
        self.assertEqual(
            {'gone': 'gone', 'sick': 'unhealthy', 'held': 'held',
             'unprobeable': 'held', 'dirty': 'reserved-dirty',
             'idle': 'idle', 'bound': 'bound', 'free': 'free'},
            gate_state.gpu_states(state, pcis, conf, 10000))
