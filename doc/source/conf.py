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

"""Sphinx configuration of the nova-lxd-accel documentation."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '_exts'))

extensions = [
    'oslo_config.sphinxext',
    'extra_specs_doc',
]

project = 'nova-lxd-accel'
copyright = 'nova-lxd-accel developers'
master_doc = 'index'
exclude_patterns = ['_build']
pygments_style = 'sphinx'
html_theme = 'alabaster'
html_static_path = []
html_theme_options = {
    'description': 'LXD containers with GPUs, MIG and InfiniBand for Nova',
}
