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

"""``python3 -m tools.sandbox``: the sandbox's commands (cli.py).

From the repository's root; ``tools/sandbox.sh`` runs
``python3 tools/sandbox`` (this folder), which works from anywhere.
"""

import os
import sys

if __package__:
    from . import cli
else:
    # Run as a folder: sys.path[0] is this folder, the repository instead.
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    from tools.sandbox import cli

sys.exit(cli.main())
