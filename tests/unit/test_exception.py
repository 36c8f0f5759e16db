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

"""The project's exceptions: their messages and where they sit in nova's.

Every ``msg_fmt`` is filled from keyword arguments; a forgotten keyword
must still give an exception (nova logs the format error), never a
``KeyError`` in the middle of an error path. The messages an operator
sees say what to do, and the classes derive from the nova exceptions the
compute manager and the API react to.
"""

import inspect
import re

import fixtures
from nova import exception as nova_exception
import testtools

from nova_lxd_accel import exception

PLACEHOLDER = re.compile(r'%\((\w+)\)s')


def _classes():
    """Every exception class the module defines."""
    return [cls for _name, cls in inspect.getmembers(exception,
                                                     inspect.isclass)
            if issubclass(cls, nova_exception.NovaException) and
            cls.__module__ == exception.__name__]


def _kwargs(cls):
    """A distinct value for each placeholder of ``cls.msg_fmt``."""
    return {name: '<%s-value>' % name
            for name in PLACEHOLDER.findall(cls.msg_fmt)}


class FormattingTest(testtools.TestCase):

    def test_the_module_defines_its_exceptions(self):
        # guards the two tests below against an empty list
        self.assertGreater(len(_classes()), 30)

    def test_every_message_fills_all_its_placeholders(self):
        for cls in _classes():
            kwargs = _kwargs(cls)
            message = str(cls(**kwargs))
            for value in kwargs.values():
                self.assertIn(value, message, cls.__name__)
            self.assertNotIn('%(', message, cls.__name__)
            self.assertEqual(message, cls(**kwargs).format_message())

    def test_a_missing_keyword_gives_the_bare_message_not_an_error(self):
        log = self.useFixture(fixtures.FakeLogger())
        logged = 'Exception in string format operation'
        for cls in _classes():
            kwargs = _kwargs(cls)
            if not kwargs:
                continue
            kwargs.popitem()
            before = log.output.count(logged)
            error = cls(**kwargs)
            self.assertEqual(cls.msg_fmt, str(error), cls.__name__)
            self.assertEqual(before + 1, log.output.count(logged),
                             cls.__name__)

    def test_keyword_values_are_kept_for_callers(self):
        error = exception.LXDOperationFailed(action='start', target='c1',
                                             reason='busy')
        self.assertEqual('busy', error.kwargs['reason'])
        self.assertEqual(500, error.kwargs['code'])

    def test_a_precondition_failure_reads_as_the_refused_operation(self):
        error = exception.LXDPreconditionFailed(
            action='update', target='instance nova-1',
            reason='ETag mismatch')
        self.assertEqual('LXD refused to update instance nova-1: ETag '
                         'mismatch', str(error))


class MessagesSayWhatToDoTest(testtools.TestCase):

    def _message(self, cls):
        return str(cls(**_kwargs(cls)))

    def test_operator_actions(self):
        for cls, advice in (
                (exception.LXDUnreachable, '`lxc info`'),
                (exception.LXDUnreachable, '[lxd] endpoint in nova.conf'),
                (exception.DaemonUnreachable, '`<check-value>`'),
                (exception.LXDOperationTimeout, 'raise [lxd] timeout'),
                (exception.ContainerGone, 'openstack server rebuild'),
                (exception.VIFPlugFailed,
                 '[os_vif_ovs] ovsdb_connection'),
                (exception.DaemonAmbiguous,
                 'set [lxd] endpoint in nova.conf to <endpoints-value>'),
                (exception.ImageToolMissing,
                 'apt-get install <package-value>'),
                (exception.GpuHeld,
                 'nova-lxd-accel gpu release <pci-value>'),
                (exception.SharedGpuOtherProject,
                 '[lxd_accelerators] shared_gpu_any_project'),
                (exception.SharedGpuMpsOtherProject,
                 'a flavor without a quota'),
                (exception.InfinibandCardOtherProject,
                 '[lxd_accelerators] infiniband_vf_any_project'),
                (exception.SharedGpuModeMismatch,
                 '<trait-value>=required'),
                (exception.SpawnInterrupted,
                 'Delete the server and create it again'),
                (exception.LXDConcurrentUpdate, 'try again'),
                (exception.BootFromVolumeNotSupported,
                 'boot from an LXD image')):
            self.assertIn(advice, self._message(cls), cls.__name__)

    def test_a_bad_extra_spec_names_the_commands_that_fix_it(self):
        message = str(exception.FlavorExtraSpecInvalid(
            flavor='g1.large', key='lxd:processes', value='0',
            reason='0 is less than the min value of 1'))
        self.assertIn('Flavor g1.large has extra spec lxd:processes=0',
                      message)
        self.assertIn('`openstack flavor set` / `unset --property '
                      'lxd:processes`', message)
        self.assertIn('microversion 2.86', message)

    def test_inconsistent_extra_specs_say_only_boot_checks_them(self):
        message = str(exception.FlavorExtraSpecsInconsistent(
            flavor='g1', reason='lxd:gpu_memory_mb needs a share'))
        self.assertIn('refused when an instance boots', message)


class HierarchyTest(testtools.TestCase):

    def test_nova_sees_the_meaning_of_each_failure(self):
        for cls, base in (
                # the compute manager's reactions
                (exception.ContainerNotFound,
                 nova_exception.InstanceNotFound),
                (exception.BootFromVolumeNotSupported,
                 nova_exception.BuildAbortException),
                (exception.BootFromVolumeNotSupported,
                 nova_exception.InvalidBDMFormat),
                (exception.VIFNotSupported,
                 nova_exception.VirtualInterfacePlugException),
                (exception.VIFPlugFailed,
                 nova_exception.VirtualInterfacePlugException),
                (exception.FlavorExtraSpecInvalid, nova_exception.Invalid),
                (exception.FlavorExtraSpecsInconsistent,
                 exception.FlavorExtraSpecInvalid)):
            self.assertTrue(issubclass(cls, base),
                            '%s is not a %s' % (cls.__name__, base.__name__))

    def test_the_project_catches_its_own_families(self):
        for cls, base in (
                (exception.LXDObjectNotFound, exception.LXDOperationFailed),
                (exception.LXDOperationGone, exception.LXDObjectNotFound),
                (exception.LXDPreconditionFailed,
                 exception.LXDOperationFailed),
                (exception.SharedGpuOtherProject,
                 exception.AcceleratorUnavailable),
                (exception.SharedGpuMpsOtherProject,
                 exception.SharedGpuOtherProject),
                (exception.InfinibandCardOtherProject,
                 exception.AcceleratorUnavailable),
                (exception.SharedGpuModeMismatch,
                 exception.AcceleratorUnavailable),
                (exception.DaemonUnreachable, exception.LXDUnreachable),
                (exception.EventStreamLost, exception.LXDUnreachable),
                (exception.DaemonNotUsable, exception.LXDNotReady)):
            self.assertTrue(issubclass(cls, base),
                            '%s is not a %s' % (cls.__name__, base.__name__))

    def test_project_errors_share_one_base(self):
        # only the two that must be nova's own kinds stand outside it
        outside = sorted(cls.__name__ for cls in _classes()
                         if not issubclass(cls, exception.LXDAccelException))
        self.assertEqual(['BootFromVolumeNotSupported', 'ContainerNotFound'],
                         outside)

    def test_http_codes_follow_nova(self):
        self.assertEqual(404, exception.ContainerNotFound(
            instance_id='i-1', container='nova-i-1').code)
        self.assertEqual(400, exception.FlavorExtraSpecInvalid(
            flavor='f', key='k', value='v', reason='r').code)
        self.assertEqual(500, exception.LXDUnreachable(
            endpoint='unix:///var/snap/lxd/common/lxd/unix.socket',
            reason='refused').code)
