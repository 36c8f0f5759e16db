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

"""What the sub-commands share: the error line, files, options, nova.conf.

nova.conf files are real files read by oslo.config; the options are this
package's own, registered by :func:`common.load_conf`.
"""

import argparse
import contextlib
import io
import os

import fixtures
import testtools

from nova_lxd_accel.cmd import common


def _args(*config_files, state_dir=None):
    return argparse.Namespace(config_file=list(config_files),
                              state_dir=state_dir)


class TestErrorAndRead(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.tmp = self.useFixture(fixtures.TempDir()).path

    def test_error_is_one_line_on_stderr_naming_the_command(self):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            common.error('doctor', 'the daemon is gone')
        self.assertEqual('', out.getvalue())
        self.assertEqual('nova-lxd-accel doctor: error: the daemon is gone\n',
                         err.getvalue())

    def test_read_returns_the_text_of_a_file(self):
        path = os.path.join(self.tmp, 'list.txt')
        with open(path, 'w', encoding='utf-8') as f:
            f.write('GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)\n')
        self.assertEqual('GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)\n',
                         common.read(path))

    def test_read_of_a_missing_file_names_it(self):
        path = os.path.join(self.tmp, 'missing.json')
        exc = self.assertRaises(common.InputError, common.read, path)
        self.assertIn(path + ': cannot read: ', str(exc))
        self.assertIn('No such file', str(exc))

    def test_read_of_a_directory_names_it(self):
        exc = self.assertRaises(common.InputError, common.read, self.tmp)
        self.assertIn(self.tmp + ': cannot read: ', str(exc))

    def test_read_of_a_binary_file_is_an_input_error(self):
        path = os.path.join(self.tmp, 'resources.json')
        with open(path, 'wb') as f:
            f.write(b'\xff\xfe{"gpu": {}}')
        exc = self.assertRaises(common.InputError, common.read, path)
        self.assertIn(path + ': cannot read: ', str(exc))
        self.assertIn('utf-8', str(exc))


class TestWhen(testtools.TestCase):

    def test_unix_time_in_utc(self):
        self.assertEqual('1970-01-01T00:00:00Z', common.when(0.5))
        self.assertEqual('1971-01-01T00:00:00Z', common.when(365 * 86400))
        self.assertEqual('1971-01-01T01:02:03Z',
                         common.when(365 * 86400 + 3723))

    def test_no_time_is_a_dash(self):
        self.assertEqual('-', common.when(None))
        self.assertEqual('-', common.when(0))


class TestOptions(testtools.TestCase):

    def parser(self):
        parser = argparse.ArgumentParser(prog='nova-lxd-accel')
        subparsers = parser.add_subparsers(dest='command')
        sub = common.add_command(subparsers, 'probe', lambda args: 7,
                                 help='h', description='d')
        common.add_format(sub)
        common.add_at(sub)
        common.add_common(sub)
        return parser

    def test_defaults(self):
        args = self.parser().parse_args(['probe'])
        self.assertEqual(('table', None, None, None),
                         (args.format, args.at, args.config_file,
                          args.state_dir))
        self.assertEqual(7, args.func(args))

    def test_values(self):
        args = self.parser().parse_args([
            'probe', '--format', 'json', '--at', '1784100000.5',
            '--config-file', 'a.conf', '--config-file', 'b.conf',
            '--state-dir', '/srv/gpu'])
        self.assertEqual(('json', 1784100000.5, ['a.conf', 'b.conf'],
                          '/srv/gpu'),
                         (args.format, args.at, args.config_file,
                          args.state_dir))

    def test_bad_format_and_time_are_refused_by_argparse(self):
        parser = self.parser()
        for argv in (['probe', '--format', 'yaml'],
                     ['probe', '--at', 'yesterday']):
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                exc = self.assertRaises(SystemExit, parser.parse_args, argv)
            self.assertEqual(2, exc.code)
            self.assertIn(argv[2], err.getvalue())


class TestLoadConf(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.tmp = self.useFixture(fixtures.TempDir()).path

    def write(self, name, text):
        path = os.path.join(self.tmp, name)
        with open(path, 'w') as f:
            f.write(text)
        return path

    def test_file_values_and_defaults(self):
        path = self.write('nova.conf', '[lxd_accelerators]\n'
                          'idle_report_after = 600\n'
                          '[lxd]\nstorage_pool = gpu-pool\n')
        conf = common.load_conf(_args(path))
        self.assertEqual(600, conf.lxd_accelerators.idle_report_after)
        self.assertEqual('gpu-pool', conf.lxd.storage_pool)
        self.assertEqual('/var/lib/nova/nova-lxd-accel',
                         conf.lxd_accelerators.state_dir)

    def test_later_file_wins(self):
        first = self.write('a.conf', '[lxd_accelerators]\nreport_mig = '
                           'false\nidle_report_after = 60\n')
        second = self.write('b.conf', '[lxd_accelerators]\n'
                            'idle_report_after = 120\n')
        conf = common.load_conf(_args(first, second))
        self.assertEqual((False, 120),
                         (conf.lxd_accelerators.report_mig,
                          conf.lxd_accelerators.idle_report_after))

    def test_state_dir_option_overrides_the_file(self):
        path = self.write('nova.conf',
                          '[lxd_accelerators]\nstate_dir = /from/file\n')
        self.assertEqual('/from/option', common.load_conf(
            _args(path, state_dir='/from/option')).lxd_accelerators.state_dir)
        self.assertEqual('/from/file', common.load_conf(
            _args(path)).lxd_accelerators.state_dir)

    def test_override_does_not_leak_into_the_next_conf(self):
        first = common.load_conf(_args('/dev/null', state_dir='/tmp/one'))
        second = common.load_conf(_args('/dev/null'))
        self.assertEqual('/tmp/one', first.lxd_accelerators.state_dir)
        self.assertEqual('/var/lib/nova/nova-lxd-accel',
                         second.lxd_accelerators.state_dir)

    def test_bad_value_names_the_file_and_the_option(self):
        path = self.write('nova.conf',
                          '[lxd_accelerators]\nidle_report_after = -5\n')
        exc = self.assertRaises(common.InputError, common.load_conf,
                                _args(path))
        message = str(exc)
        self.assertTrue(message.startswith(path + ': '), message)
        self.assertIn('idle_report_after', message)
        self.assertNotIn('\n', message)

    def test_bad_boolean_is_refused_when_loading(self):
        # values are read at load time, not later by the command
        path = self.write('nova.conf',
                          '[lxd_accelerators]\nreport_mig = perhaps\n')
        exc = self.assertRaises(common.InputError, common.load_conf,
                                _args(path))
        self.assertIn('report_mig', str(exc))

    def test_unparsable_file(self):
        path = self.write('nova.conf', '[lxd_accelerators\nfoo\n')
        exc = self.assertRaises(common.InputError, common.load_conf,
                                _args(path))
        self.assertIn('Invalid section', str(exc))

    def test_missing_file(self):
        path = os.path.join(self.tmp, 'missing.conf')
        exc = self.assertRaises(common.InputError, common.load_conf,
                                _args(path))
        self.assertIn(path, str(exc))

    def test_every_given_file_is_named(self):
        good = self.write('good.conf', '[DEFAULT]\n')
        path = os.path.join(self.tmp, 'missing.conf')
        exc = self.assertRaises(common.InputError, common.load_conf,
                                _args(good, path))
        self.assertTrue(str(exc).startswith('%s, %s: ' % (good, path)),
                        str(exc))
