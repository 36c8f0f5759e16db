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

"""``nova-lxd-accel``: the operator command line.

Each sub-command lives in its own module of this package, which provides
``register(subparsers)`` (adds its parser and sets ``func``) and a function
that returns the process exit status.
"""

import argparse
import sys

from nova_lxd_accel.cmd import doctor
from nova_lxd_accel.cmd import flavors
from nova_lxd_accel.cmd import gpu
from nova_lxd_accel.cmd import show_inventory
from nova_lxd_accel.cmd import usage

_SUBCOMMANDS = (show_inventory, gpu, flavors, usage, doctor)


def build_parser():
    parser = argparse.ArgumentParser(
        prog='nova-lxd-accel',
        description='Tools of the nova-lxd-accel compute driver.')
    subparsers = parser.add_subparsers(dest='command', metavar='COMMAND')
    subparsers.required = True
    for module in _SUBCOMMANDS:
        module.register(subparsers)
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == '__main__':
    sys.exit(main())
