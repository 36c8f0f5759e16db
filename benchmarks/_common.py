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

"""What the sandbox benchmarks share.

Any Python 3, standard library only at import: the benchmarks that re-run
themselves inside the sandbox venv (``--measure``) import this before they
do; openstacksdk is imported only by the functions that need it.
"""

import argparse
import json
import os
import subprocess
import time


# --- orchestration (any Python 3, stdlib only) ------------------------------

def orchestrate_or_measure(parser, argv, orchestrate, measure):
    """Parse ``argv`` and run one of the benchmark's two halves.

    ``measure(args)`` runs for the hidden ``--measure`` (added here): the
    half that :func:`measure_in_venv` starts inside the sandbox venv;
    ``orchestrate(args)`` otherwise.

    :returns: what the half returned (the exit status).
    """
    parser.add_argument('--measure', action='store_true',
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        return measure(args)
    return orchestrate(args)


def measure_in_venv(sandbox_dir, script, iterations, *extra):
    """Run ``script --measure`` with the sandbox venv's Python.

    :param extra: more arguments for the measuring half (its own options).
    :returns: the JSON document on the last line of its standard output.
    """
    venv_python = os.path.join(sandbox_dir, 'venv', 'bin', 'python')
    out = subprocess.run(
        [venv_python, os.path.abspath(script), '--measure',
         '--iterations', str(iterations)] + list(extra),
        check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


# --- measurements (inside the sandbox venv) ---------------------------------

def connect(sandbox_dir):
    """An openstacksdk connection to the sandbox cloud."""
    import openstack

    os.environ.setdefault('OS_CLIENT_CONFIG_FILE',
                          os.path.join(sandbox_dir, 'clouds.yaml'))
    return openstack.connect(cloud='sandbox')


def wait(predicate, timeout=180.0, interval=0.05):
    """Poll ``predicate`` until it returns something true, and return that.

    :raises RuntimeError: after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(interval)
    raise RuntimeError('timed out after %ss' % timeout)


def server_gone(conn, server_id):
    """Whether the Compute API answers 404 for the server."""
    import openstack.exceptions

    try:
        conn.compute.get_server(server_id)
    except openstack.exceptions.NotFoundException:
        return True
    return False
