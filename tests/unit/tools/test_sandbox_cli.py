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

"""The sandbox's commands and steps (tools/sandbox/cli.py and beside).

The step runner (the terminal line, the log, the failure report), the
choice of daemon, the image cache, the command line, and the small
helpers of Horizon and the bench: what ``tools/sandbox.sh`` (now a few
lines that hand over to cli.py) did in shell.
"""

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import textwrap

import testtools

from tools.sandbox import bench
from tools.sandbox import cli
from tools.sandbox import daemon
from tools.sandbox import horizon
from tools.sandbox import images
from tools.sandbox import layout

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

# Runs two steps of cli.Sandbox in a process of its own, as up does: one
# that prints (itself and through a child process) and one that fails
# after naming its log.
_STEPS = textwrap.dedent('''
    import os, subprocess, sys
    sys.path.insert(0, sys.argv[1])
    from tools.sandbox import cli, layout
    lay = layout.Layout(sys.argv[2], 27100)
    os.makedirs(lay.logs)
    term = cli.Terminal()
    sandbox = cli.Sandbox(lay, os.environ, term, 'tools/sandbox.sh')

    def talk():
        print('from the step')
        subprocess.run(['echo', 'from its child'], check=True)

    def fail():
        sandbox.hint = lay.path('log', 'svc.log')
        with open(sandbox.hint, 'w') as handle:
            handle.write(''.join('line %d\\n' % i for i in range(30)))
        print('about to fail')
        return 3

    try:
        sandbox.step('a talking step', talk)
        sandbox.step('a failing step', fail)
    except cli.Exit as error:
        sys.exit(error.status)
''')


class StepRunnerTest(testtools.TestCase):

    def test_output_goes_to_the_log_and_a_failure_names_its_log(self):
        with tempfile.TemporaryDirectory() as tmp:
            state = os.path.join(tmp, 'sandbox')
            result = subprocess.run(
                [sys.executable, '-c', _STEPS, REPO, state],
                capture_output=True, text=True, timeout=60)
            with open(os.path.join(state, 'log', 'sandbox.log')) as handle:
                log = handle.read()
        self.assertEqual(3, result.returncode, result.stderr)
        lines = result.stdout.splitlines()
        self.assertRegex(lines[0], r'^  \[ +\d+\.\d+s\] a talking step +ok +'
                                   r'\d+\.\d+s$')
        self.assertRegex(lines[1], r'^  \[ +\d+\.\d+s\] a failing step +'
                                   r'FAILED$')
        # the steps' output (and their children's) is in the log only
        self.assertNotIn('from', result.stdout + result.stderr)
        self.assertIn('=== ', log)
        self.assertIn(': a talking step\nfrom the step\nfrom its child\n',
                      log)
        self.assertIn('about to fail', log)
        err = result.stderr
        self.assertIn('sandbox: step "a failing step" failed (exit 3)', err)
        self.assertIn('its log: %s (last lines below); see also %s'
                      % (os.path.join(state, 'log', 'svc.log'),
                         os.path.join(state, 'log', 'sandbox.log')), err)
        self.assertIn('    | line 29\n', err)
        self.assertIn('    | line 10\n', err)
        self.assertNotIn('    | line 9\n', err)
        self.assertIn('re-run "tools/sandbox.sh up" (it resumes), or '
                      '"tools/sandbox.sh down"', err)


class CleanTest(testtools.TestCase):

    def test_clean_refuses_a_directory_up_never_made(self):
        # clean removes bridges and namespaces: only after this sandbox's
        # own up, never in any directory it is pointed at
        with tempfile.TemporaryDirectory() as tmp:
            state = os.path.join(tmp, 'not-a-sandbox')
            os.makedirs(os.path.join(state, 'etc'))
            keep = os.path.join(state, 'etc', 'precious')
            open(keep, 'w').close()
            result = subprocess.run(
                ['bash', os.path.join(REPO, 'tools', 'sandbox.sh'), 'clean'],
                env=dict(os.environ, SANDBOX_DIR=state,
                         SANDBOX_PORT_BASE='27100'),
                capture_output=True, text=True, timeout=60)
            self.assertEqual(2, result.returncode, result.stderr)
            self.assertIn('is not a sandbox directory (no backend written '
                          'by up): nothing removed', result.stderr)
            self.assertTrue(os.path.exists(keep))


class ChooseBackendTest(testtools.TestCase):

    def setUp(self):
        super().setUp()
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.layout = layout.Layout(tmp.name, 27100)
        self.environ = {'LXD_DIR': '/var/lib/lxd',
                        'INCUS_DIR': '/var/lib/incus'}
        self.running = set()

    def choose(self, named='', debian=12):
        return daemon.choose_backend(
            named, self.layout, self.environ,
            answers=lambda daemon: daemon.cli_name in self.running,
            debian=lambda: debian)

    def test_named_first(self):
        self.running = {'lxc'}
        chosen = self.choose('incus')
        self.assertEqual(('incus', 'incus', '/var/lib/incus/unix.socket'),
                         (chosen.backend, chosen.cli_name, chosen.socket))

    def test_the_one_the_sandbox_came_up_with(self):
        with open(self.layout.path('backend'), 'w') as handle:
            handle.write('incus\n')
        self.running = {'lxc'}
        self.assertEqual('incus', self.choose().backend)

    def test_a_running_daemon_lxd_first(self):
        self.running = {'incus'}
        self.assertEqual('incus', self.choose().backend)
        self.running = {'incus', 'lxc'}
        self.assertEqual('lxd', self.choose().backend)

    def test_the_distribution_s_own(self):
        self.assertEqual('lxd', self.choose(debian=12).backend)
        self.assertEqual('incus', self.choose(debian=13).backend)
        self.assertEqual('lxd', self.choose(debian=None).backend)

    def test_an_unknown_name_is_refused(self):
        error = self.assertRaises(ValueError, self.choose, 'docker')
        self.assertIn("lxd or incus, not 'docker'", str(error))


class CachedImageTest(testtools.TestCase):

    def test_built_once_per_recipe_and_replaced_when_it_changes(self):
        with tempfile.TemporaryDirectory() as tmp:
            lay = layout.Layout(os.path.join(tmp, 'sandbox'), 27100)
            build = os.path.join(tmp, 'build.sh')
            count = os.path.join(tmp, 'count')

            def write_build(marker):
                with open(build, 'w') as handle:
                    handle.write('#!/bin/sh\necho %s >>%s\necho image >"$1"'
                                 '\n' % (marker, count))
                os.chmod(build, 0o755)

            calls = []
            write_build('one')
            images.cached_image(lay, 'img', build,
                                lambda *args: calls.append(args))
            images.cached_image(lay, 'img', build,
                                lambda *args: calls.append(args))
            write_build('two')
            images.cached_image(lay, 'img', build,
                                lambda *args: calls.append(args))
            with open(count) as handle:
                builds = handle.read().split()
            with open(os.path.join(lay.data, 'images', 'img.recipe')) as f:
                recipe = f.read()
            with open(build, 'rb') as handle:
                # what the shell stored (sha256sum): old caches stay valid
                shell_recipe = hashlib.sha256(handle.read()).hexdigest()
        tarball = os.path.join(lay.data, 'images', 'img.tar.gz')
        self.assertEqual(['one', 'two'], builds)
        self.assertEqual([('image', 'img', tarball, 'replace'),
                          ('image', 'img', tarball),
                          ('image', 'img', tarball, 'replace')], calls)
        self.assertEqual(shell_recipe + '\n', recipe)

    def test_one_tarball_under_more_names(self):
        with tempfile.TemporaryDirectory() as tmp:
            lay = layout.Layout(os.path.join(tmp, 'sandbox'), 27100)
            build = os.path.join(tmp, 'build.sh')
            with open(build, 'w') as handle:
                handle.write('#!/bin/sh\necho image >"$1"\n')
            os.chmod(build, 0o755)
            calls = []
            images.cached_image(lay, 'img', build,
                                lambda *args: calls.append(args),
                                also=('img-alt',))
        tarball = os.path.join(lay.data, 'images', 'img.tar.gz')
        self.assertEqual([('image', 'img', tarball, 'replace'),
                          ('image', 'img-alt', tarball, 'replace')], calls)

    def test_built_before_the_cloud_then_uploaded_once(self):
        # image debian --build-only while the tests run, then image debian
        with tempfile.TemporaryDirectory() as tmp:
            lay = layout.Layout(os.path.join(tmp, 'sandbox'), 27100)
            build = os.path.join(tmp, 'build.sh')
            count = os.path.join(tmp, 'count')
            with open(build, 'w') as handle:
                handle.write('#!/bin/sh\necho x >>%s\necho image >"$1"\n'
                             % count)
            os.chmod(build, 0o755)
            path, _ = images.cached_tarball(lay, 'img', build)
            calls = []
            for _ in range(2):
                images.cached_image(lay, 'img', build,
                                    lambda *args: calls.append(args))
            with open(count) as handle:
                self.assertEqual(['x'], handle.read().split())
        # the first upload replaces whatever Glance had of an older recipe
        self.assertEqual([('image', 'img', path, 'replace'),
                          ('image', 'img', path)], calls)


class CommandLineTest(testtools.TestCase):

    def test_up_takes_its_options(self):
        args = cli.parse(['up', '--backend', 'incus', '--hardware', 'h200-vm',
                          '--with-horizon'], 'sandbox.sh')
        self.assertEqual(('up', 'incus', 'h200-vm', '1'),
                         (args.command, args.backend, args.hardware,
                          args.horizon))
        self.assertEqual('0', cli.parse(['up', '--without-horizon'],
                                        'sandbox.sh').horizon)

    def test_other_commands_take_no_up_option(self):
        self.assertIsNone(cli.parse(['status', '--backend', 'lxd'], 's'))
        self.assertIsNone(cli.parse(['up', 'extra'], 's'))
        self.assertIsNone(cli.parse(['up', '--no-such-option'], 's'))
        self.assertEqual(['3'], cli.parse(['bench', '3'], 's').args)

    def test_density_bench_options(self):
        args = cli.parse(['bench', '--density', '500', '--wave', '20'], 's')
        self.assertEqual((500, 20), (args.density, args.wave))
        self.assertEqual(0, cli.parse(['bench', '--density', '50'],
                                      's').wave)
        # the idle seconds at checkpoints: the bench's own unless given
        self.assertEqual(-1, cli.parse(['bench', '--density', '50'],
                                       's').idle)
        self.assertEqual(1, cli.parse(['bench', '--density', '2', '--idle',
                                       '1'], 's').idle)
        # the Debian image can be built before the cloud runs
        self.assertTrue(cli.parse(['image', 'debian', '--build-only'],
                                  's').build_only)
        self.assertIsNone(cli.parse(['up', '--build-only'], 's'))
        for wrong in (['bench', '--wave', '20'],            # no N
                      ['bench', '--idle', '0'],             # no N
                      ['bench', '3', '--idle', '0'],        # not density
                      ['bench', '--density', '5', '--idle', '-2'],
                      ['bench', '--density', '5', '3'],     # two counts
                      ['bench', '--density', 'x'],
                      ['bench', '--density', '-5'],
                      ['status', '--density', '5'],
                      ['up', '--wave', '5']):
            self.assertIsNone(cli.parse(wrong, 's'), wrong)

    def test_usage_exit_status_and_unknown_hardware(self):
        with tempfile.TemporaryDirectory() as tmp:
            env = dict(os.environ, SANDBOX_DIR=os.path.join(tmp, 's'),
                       SANDBOX_PORT_BASE='27100')
            sandbox = os.path.join(REPO, 'tools', 'sandbox.sh')
            usage = subprocess.run(['bash', sandbox, 'bench', 'x'], env=env,
                                   capture_output=True, text=True,
                                   timeout=60)
            image = subprocess.run(['bash', sandbox, 'image', 'ubuntu'],
                                   env=env, capture_output=True, text=True,
                                   timeout=60)
            reach = subprocess.run(['bash', sandbox, 'reach', 'maybe'],
                                   env=env, capture_output=True, text=True,
                                   timeout=60)
            # on, with no sandbox: refused before the host is touched
            reach_on = subprocess.run(['bash', sandbox, 'reach', 'on'],
                                      env=env, capture_output=True,
                                      text=True, timeout=60)
        self.assertEqual(2, usage.returncode)
        self.assertIn('usage: %s up [--backend lxd|incus]' % sandbox,
                      usage.stdout)
        self.assertEqual(1, image.returncode)
        self.assertIn('usage: %s image debian' % sandbox, image.stderr)
        self.assertEqual(1, reach.returncode)
        self.assertIn('usage: %s reach on|off' % sandbox, reach.stderr)
        self.assertEqual(1, reach_on.returncode)
        self.assertIn('the sandbox does not run', reach_on.stderr)


class HelpersTest(testtools.TestCase):

    def test_horizon_boots_a_mig_flavor_when_one_is_proposed(self):
        with tempfile.TemporaryDirectory() as tmp:
            lay = layout.Layout(tmp, 27100)
            os.makedirs(lay.data)
            self.assertEqual('sandbox.small', horizon.test_flavor(lay))
            with open(os.path.join(lay.data, 'gpu-flavors.json'), 'w') as f:
                json.dump([{'name': 'sandbox.a100',
                            'extra_specs': {'resources:PGPU': '1'}},
                           {'name': 'sandbox.mig',
                            'extra_specs': {'resources:CUSTOM_MIG_1G_10GB':
                                            '1'}}], f)
            self.assertEqual('sandbox.mig', horizon.test_flavor(lay))

    def test_horizon_gpu_plugin_steps_only_with_both_gpu_flavors(self):
        with tempfile.TemporaryDirectory() as tmp:
            lay = layout.Layout(tmp, 27100)
            os.makedirs(lay.hardware)
            flavors = os.path.join(lay.data, 'gpu-flavors.json')
            mig = {'name': 'sandbox.mig', 'extra_specs': {
                'resources:CUSTOM_MIG_1G_10GB': '1',
                'Accelerator:Model': 'H100 80GB HBM3 MIG 1g.10gb'}}
            with open(flavors, 'w') as f:
                json.dump([mig], f)
            self.assertEqual([], horizon.gpu_plugin_arguments(lay))
            with open(flavors, 'w') as f:
                json.dump([{'name': 'sandbox.a100',
                            'extra_specs': {'resources:PGPU': '1'}}, mig], f)
            self.assertEqual(
                ['--gpu-flavor', 'sandbox.a100', '--mig-words',
                 'MIG 1g.10gb', '--hardware-dir', lay.hardware],
                horizon.gpu_plugin_arguments(lay))

    def test_horizon_choice_is_kept(self):
        with tempfile.TemporaryDirectory() as tmp:
            lay = layout.Layout(tmp, 27100)
            self.assertFalse(horizon.enabled(lay, ''))
            os.makedirs(lay.horizon_data)
            open(os.path.join(lay.horizon_data, 'enabled'), 'w').close()
            self.assertTrue(horizon.enabled(lay, ''))
            self.assertFalse(horizon.enabled(lay, '0'))

    def test_bench_reads_openrc(self):
        with tempfile.TemporaryDirectory() as tmp:
            lay = layout.Layout(tmp, 27100)
            with open(lay.path('openrc'), 'w') as handle:
                handle.write('# comment\nexport OS_USERNAME=admin\n'
                             'export OS_PASSWORD=s3cret\n'
                             'export PATH=/x/venv/bin:$PATH\n')
            env = bench.openstack_env(lay)
        self.assertEqual(('admin', 's3cret'),
                         (env['OS_USERNAME'], env['OS_PASSWORD']))
        self.assertTrue(env['PATH'].startswith(lay.venv + '/bin:'))
