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

"""Issue 11 item 14: unsafe ``[lxd] profiles`` refused or stripped.

Real profiles in the real daemon; the driver's init_host reads them.
"""

import uuid

from nova_lxd_accel import exception
from tests.integration import base


class UnsafeProfilesTest(base.DriverTestCase):

    def profile(self, config=None, devices=None):
        name = 'nova-lxd-accel-%s' % uuid.uuid4().hex[:10]
        self.project.admin.api.profiles.post(json={
            'name': name, 'config': config or {}, 'devices': devices or {}})
        self.addCleanup(self.project.admin.api.profiles[name].delete)
        return name

    def unsafe_profile(self, pinned=True):
        devices = {'gpu0': {'type': 'gpu'},
                   'gpu1': {'type': 'gpu', 'vendorid': '10de'},
                   'data': {'type': 'disk', 'source': '/srv',
                            'path': '/srv', 'readonly': 'true'}}
        if pinned:
            # Pinned to one GPU: every instance would still get that one,
            # outside Placement.
            devices['pinned'] = {'type': 'gpu', 'pci': '0000:ff:1f.7'}
        return self.profile(
            config={'raw.lxc': 'lxc.apparmor.profile=unconfined',
                    'raw.apparmor': 'capability sys_admin,',
                    'security.privileged': 'true',
                    'security.nesting': 'true',
                    'limits.kernel.nofile': '4096'},
            devices=devices)

    def test_refused_at_startup_by_default(self):
        name = self.unsafe_profile()
        safe = self.profile(config={'limits.kernel.nofile': '4096'})
        self.flags(profiles=[safe, name], group='lxd')
        error = self.assertRaises(exception.LXDNotReady,
                                  self.driver.init_host, self.host)
        message = str(error)
        for what in ('config raw.lxc=', 'config raw.apparmor=',
                     'config security.privileged=true',
                     'config security.nesting=true',
                     'device gpu0 (type gpu)', 'device gpu1 (type gpu)',
                     'device pinned (type gpu)', 'device data (type disk)',
                     'unsafe_profile_content = strip'):
            self.assertIn(what, message)
        self.assertIn('profile %s has' % name, message)
        for fine in ('nofile', 'profile %s' % safe):
            self.assertNotIn(fine, message)

    def test_safe_profiles_accepted(self):
        safe = self.profile(
            config={'limits.kernel.nofile': '4096',
                    'security.privileged': 'false'},
            devices={'masked': {'type': 'none'}})
        self.flags(profiles=[safe], group='lxd')
        self.driver.init_host(self.host)

    def test_stripped_from_every_container(self):
        name = self.unsafe_profile(pinned=False)
        self.flags(profiles=[name], unsafe_profile_content='strip',
                   group='lxd')
        self.driver.init_host(self.host)
        instance = self.make_instance()
        self.driver.spawn(self.context, instance, self.tiny_image(), [],
                          None, {})
        # Before the profile goes: LXD keeps a profile in use.
        self.addCleanup(self.driver.destroy, self.context, instance, [])
        record = self.container(instance)
        self.assertEqual('Running', record['status'])
        self.assertEqual([name], record['profiles'])
        expanded = record['expanded_config']
        self.assertEqual('false', expanded['security.privileged'])
        self.assertEqual('false', expanded['security.nesting'])
        for key in ('raw.lxc', 'raw.apparmor'):
            self.assertTrue(expanded[key].startswith('#'), expanded[key])
        self.assertEqual('4096', expanded['limits.kernel.nofile'])
        devices = record['expanded_devices']
        self.assertEqual([], [dev for dev in devices
                              if devices[dev]['type'] == 'gpu'])
        # the host path, too: masked with a none device
        self.assertEqual('none', devices['data']['type'])

    def test_unstrippable_raw_keys_refused_even_in_strip_mode(self):
        name = self.profile(config={'raw.idmap': 'both 0 0'})
        self.flags(profiles=[name], unsafe_profile_content='strip',
                   group='lxd')
        error = self.assertRaises(exception.LXDNotReady,
                                  self.driver.init_host, self.host)
        self.assertIn('raw.idmap', str(error))
        self.assertIn('cannot be stripped', str(error))
