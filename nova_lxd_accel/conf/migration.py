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

"""The ``[lxd_migration]`` group: moving containers between LXD hosts."""

from oslo_config import cfg

migration_group = cfg.OptGroup(
    'lxd_migration',
    title='LXD migration options',
    help="""
How nova-lxd-accel moves containers between compute hosts (cold migration
and resize to another host) with LXD's instance migration API.
""")

ALL_OPTS = []


def register_opts(conf):
    conf.register_group(migration_group)
    conf.register_opts(ALL_OPTS, group=migration_group)


def list_opts():
    return [(migration_group, ALL_OPTS)]
