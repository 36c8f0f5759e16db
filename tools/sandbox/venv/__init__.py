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

"""The modules that the sandbox venv's Python runs.

They need OpenStack (or what the venv has): the services' servers
(wsgi_server.py, in_process.py), the LXD proxy of simulated hardware
(lxd_proxy.py, also used by the tests), the configuration files
(configs.py) and the OpenStack API calls (provision.py). Run one with
``python tools/sandbox/venv MODULE ARGS...`` (see __main__.py).
"""
