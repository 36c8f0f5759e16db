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

"""Wait for a server's status, polling the compute API in one process.

Usage: VENV/bin/python tools/sandbox/venv wait_server SERVER STATUS TIMEOUT

``tools/sandbox-e2e.sh`` waits through this rather than starting an
``openstack server show`` every half second: each such process costs a
core for two seconds, which the cloud it waits for then lacks.

Exits 0 once SERVER (name or id) has STATUS and no task; 3 when it went to
ERROR (its fault on stdout); 1 after TIMEOUT seconds (its status and task
on stdout). The cloud is the sandbox's (``OS_CLOUD``,
``OS_CLIENT_CONFIG_FILE``).
"""

import sys
import time

#: seconds between two looks at the server
INTERVAL = 0.5


def wait(get, want, timeout, sleep=time.sleep, clock=time.monotonic):
    """(status, text) once ``get()`` shows ``want`` with no task.

    :param get: callable returning the server (``status``, ``task_state``,
        ``fault``).
    """
    deadline = clock() + timeout
    while True:
        server = get()
        status, task = server.status, server.task_state
        if status == want and not task:
            return 0, ''
        if status == 'ERROR' and want != 'ERROR':
            return 3, ((server.fault or {}).get('message') or
                       'no fault recorded')
        if clock() >= deadline:
            return 1, 'status %s, task %s' % (status, task)
        sleep(INTERVAL)


def main(argv):
    if len(argv) != 3:
        sys.stderr.write(__doc__.split('\n\n')[1] + '\n')
        return 2
    import openstack

    name, want, timeout = argv[0], argv[1], float(argv[2])
    conn = openstack.connect()
    found = conn.compute.find_server(name)
    if found is None:
        print('no server %s' % name)
        return 1
    server_id = found.id
    status, text = wait(lambda: conn.compute.get_server(server_id), want,
                        timeout)
    if text:
        print(text)
    return status


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
