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

"""Run a module of this folder with the sandbox venv's Python.

Usage: VENV/bin/python tools/sandbox/venv MODULE [ARGS...]

MODULE is a module of this folder, by name or by the path of its file
(``wsgi_server`` or ``.../venv/wsgi_server.py``); it runs as
``__main__`` with ARGS, its relative imports resolved in the package
tools.sandbox. (``python -m tools.sandbox.venv MODULE`` from the
repository's root does the same.)

The repository is on sys.path only while the package is imported: the
services import nova_lxd_accel, and that must stay the build installed in
the venv, not the checkout's tree.
"""

import os
import runpy
import sys

if not __package__:
    # sys.path[0] is this folder
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.dirname(os.path.abspath(__file__)))))
    import tools.sandbox.venv  # noqa: F401
    del sys.path[0]

if len(sys.argv) < 2:
    sys.exit(__doc__.split('\n\n')[1])
MODULE = os.path.splitext(os.path.basename(sys.argv.pop(1)))[0]
runpy.run_module('tools.sandbox.venv.' + MODULE, run_name='__main__',
                 alter_sys=True)
