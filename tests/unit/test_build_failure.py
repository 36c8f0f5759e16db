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

"""lifecycle.build_failure: which build failures abort, which reschedule.

The messages are LXD 5.0.2's own (seen in tests/integration/test_faults.py
and the sandbox).
"""

from nova.compute import task_states
from nova.compute import vm_states
from nova import exception as nova_exception
import testtools

from nova_lxd_accel import exception
from nova_lxd_accel import lifecycle


class _Instance(object):
    uuid = '4b0f7c3e-0000-4000-8000-000000000001'
    vm_state = vm_states.BUILDING
    task_state = task_states.SPAWNING


def _refused(action, reason):
    return exception.LXDOperationFailed(action=action, target='instance c',
                                        reason=reason)


class BuildFailureTest(testtools.TestCase):

    def assertAborts(self, exc, *words):
        failure = lifecycle.build_failure(_Instance(), exc)
        self.assertIsInstance(failure, nova_exception.BuildAbortException)
        for word in words:
            self.assertIn(word, str(failure))

    def assertRaisedAsIs(self, exc):
        self.assertIs(exc, lifecycle.build_failure(_Instance(), exc))

    def test_lxd_rejections_abort_with_the_reason(self):
        self.assertAborts(_refused(
            'start', 'Failed to start device "gpu0": Invalid PCI address '
            '(no device found): 0000:ff:1f.7'), 'gpu0', '0000:ff:1f.7')
        self.assertAborts(_refused(
            'start', 'Failed to run: /usr/bin/lxd forkstart p_c '
            '/var/lib/lxd/containers: exit status 1'), 'forkstart')
        self.assertAborts(_refused(
            'create', 'Invalid config: Unknown configuration key: '
            'limits.bogus'), 'limits.bogus')

    def test_operator_and_flavor_refusals_abort(self):
        self.assertAborts(exception.FlavorNotAllowed(
            flavor='f', feature='a privileged container',
            how='set [lxd] allow_privileged_containers'),
            'allow_privileged_containers')
        self.assertAborts(exception.AcceleratorNotBindable(
            resource_class='VGPU', provider='p', reason='no such thing'),
            'VGPU')

    def test_host_local_failures_reschedule(self):
        for exc in (
                exception.LXDUnreachable(endpoint='/x/unix.socket',
                                         reason='refused'),
                exception.LXDOperationTimeout(action='start', target='c',
                                              timeout=30),
                exception.AcceleratorUnavailable(
                    count=1, resource_class='PGPU', provider='p',
                    device='d', free=0, held='x'),
                _refused('create', 'Failed creating instance from image: '
                         'write /var/lib/lxd/x: no space left on device'),
                _refused('delete', 'Instance is busy running a "stop" '
                         'operation'),
                _refused('start', 'Failed to start device "nova-gpu0": '
                         'Failed to detect requested GPU device'),
                RuntimeError('a bug')):
            self.assertRaisedAsIs(exc)

    def test_decided_ones_unchanged(self):
        # nova aborts on these itself, with the same message.
        self.assertRaisedAsIs(nova_exception.ImageUnacceptable(
            image_id='i', reason='neither a tarball nor a squashfs'))
        self.assertRaisedAsIs(nova_exception.BuildAbortException(
            instance_uuid='u', reason='r'))
        self.assertRaisedAsIs(exception.BootFromVolumeNotSupported(
            instance_uuid='u'))


class InterruptedBuildTest(testtools.TestCase):

    def test_only_builds_in_progress(self):
        for vm_state, task_state, interrupted in (
                (vm_states.BUILDING, None, True),
                (vm_states.BUILDING, task_states.SPAWNING, True),
                (vm_states.ACTIVE, task_states.REBUILD_SPAWNING, True),
                (vm_states.ACTIVE, None, False),
                (vm_states.STOPPED, None, False),
                (vm_states.ERROR, None, False),
                (vm_states.RESCUED, None, False),
                (vm_states.ACTIVE, task_states.REBOOTING, False)):
            instance = _Instance()
            instance.vm_state, instance.task_state = vm_state, task_state
            self.assertEqual(interrupted,
                             lifecycle._is_interrupted_build(instance),
                             (vm_state, task_state))
