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

"""nova-lxd-accel's Horizon plugin: the GPU fleet and a server's accelerators.

Admin > Compute > GPUs shows every compute host's GPUs and InfiniBand cards
as Placement reports them; a server's page gets an "Accelerators" tab. It
reads only the public APIs (Placement, Nova, Keystone) with the logged-in
user's token. :mod:`.fleet` and :mod:`.placement` import neither Django nor
Horizon (they are unit tested without them); the panel, the tab and the
``enabled/`` file are Horizon's.
"""
