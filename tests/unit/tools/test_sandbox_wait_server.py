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

"""tools/sandbox/venv/wait_server.py: the e2e's one polling process."""

import types

import testtools

from tools.sandbox.venv import wait_server


def _servers(*states):
    """A get() answering each (status, task[, fault]) in turn."""
    answers = [types.SimpleNamespace(status=s[0], task_state=s[1],
                                     fault=s[2] if len(s) > 2 else None)
               for s in states]
    return lambda: answers.pop(0) if len(answers) > 1 else answers[0]


class WaitTest(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.now = [0.0]
        self.slept = []

    def wait(self, get, want, timeout=10):
        def sleep(seconds):
            self.slept.append(seconds)
            self.now[0] += seconds
        return wait_server.wait(get, want, timeout, sleep=sleep,
                                clock=lambda: self.now[0])

    def test_until_the_status_and_no_task(self):
        get = _servers(('BUILD', 'spawning'), ('ACTIVE', 'spawning'),
                       ('ACTIVE', None))
        self.assertEqual((0, ''), self.wait(get, 'ACTIVE'))
        self.assertEqual([0.5, 0.5], self.slept)

    def test_error_gives_the_fault(self):
        get = _servers(('BUILD', 'spawning'),
                       ('ERROR', None, {'message': 'No valid host'}))
        self.assertEqual((3, 'No valid host'), self.wait(get, 'ACTIVE'))
        self.assertEqual((3, 'no fault recorded'),
                         self.wait(_servers(('ERROR', None)), 'ACTIVE'))

    def test_timeout_says_where_it_stood(self):
        get = _servers(('VERIFY_RESIZE', 'resize_finish'))
        self.assertEqual((1, 'status VERIFY_RESIZE, task resize_finish'),
                         self.wait(get, 'VERIFY_RESIZE', timeout=2))
        self.assertEqual(4, len(self.slept))
