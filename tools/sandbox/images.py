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

"""What the sandbox puts in Glance and Nova: images and flavors.

:func:`cached_image` builds an image tarball once per version of its build
script (its recipe) under ``data/images/`` and hands it to
``provision.py image``; a new recipe replaces the image in Glance (servers
of the old one keep running). :func:`make_flavors` asks this project's
``nova-lxd-accel inventory`` and ``flavors`` what the host (or the
simulated one) has, and hands the answers to ``provision.py flavors``.
Any Python 3, standard library only.
"""

import os
import subprocess

from . import catalogue
from . import hardware
from . import layout as layout_module

TINY_BUILD = os.path.join(layout_module.REPO_DIR, 'tools',
                          'build-tiny-image.sh')
DEBIAN_BUILD = os.path.join(layout_module.REPO_DIR, 'tools',
                            'build-debian-image.sh')
DEBIAN_IMAGE_NAME = 'debian-12'
#: the same image under a second name: tempest's image_ref_alt (the tests
#: that filter servers by image need two distinct images)
DEBIAN_ALT_NAME = 'debian-12-alt'
FLAVOR_RECIPES = os.path.join(layout_module.REPO_DIR, 'devstack', 'files',
                              'accel-flavors.py')


def tarball(layout, name):
    return os.path.join(layout.data, 'images', name + '.tar.gz')


def cached_tarball(layout, name, build):
    """NAME's tarball, built by BUILD once per version of BUILD.

    :returns: (its path, the version of BUILD it was made by)
    """
    path = tarball(layout, name)
    recipe = os.path.join(layout.data, 'images', name + '.recipe')
    os.makedirs(os.path.dirname(path), exist_ok=True)
    want = layout_module.digest_files([build])
    have = None
    if os.path.exists(path) and os.path.getsize(path):
        have = (layout_module.read_text(recipe) or '').strip()
    if have != want:
        print('building %s (%s)' % (name, os.path.basename(build)))
        subprocess.run([build, path], check=True)
        with open(recipe, 'w') as handle:
            handle.write(want + '\n')
    else:
        print('%s: cached %s' % (name, path))
    return path, want


def cached_image(layout, name, build, provision, also=()):
    """NAME in Glance, built by BUILD once per version of BUILD.

    The Glance image is replaced when its tarball's version is not the
    one last uploaded (the tarball may have been built before the cloud
    ran: ``image debian --build-only``).

    :param also: more names the same tarball is uploaded as.
    """
    path, version = cached_tarball(layout, name, build)
    uploaded = os.path.join(layout.data, 'images', name + '.uploaded')
    replace = []
    if (layout_module.read_text(uploaded) or '').strip() != version:
        replace = ['replace']
    for each in (name,) + tuple(also):
        provision('image', each, path, *replace)
    with open(uploaded, 'w') as handle:
        handle.write(version + '\n')


def _json_of(argv, path, log):
    """Run ARGV, its stdout to PATH (kept only when it succeeds)."""
    with open(path + '.tmp', 'w') as out:
        ok = subprocess.run(argv, stdout=out, stderr=log).returncode == 0
    if ok:
        os.rename(path + '.tmp', path)
    else:
        os.remove(path + '.tmp')
    return ok


def make_flavors(layout, provision, log):
    """The CPU, accelerator and GPU flavors.

    The accelerator flavors are the DevStack plugin's; the GPU flavors
    are those ``nova-lxd-accel flavors`` proposes (Accelerator:*
    properties), sized for the tiny image.
    """
    inventory = os.path.join(layout.data, 'inventory.json')
    lines = os.path.join(layout.data, 'accel-flavors.txt')
    gpu_flavors = os.path.join(layout.data, 'gpu-flavors.json')
    compute_conf = os.path.join(layout.etc, 'nova', 'nova-compute.conf')
    tool = os.path.join(layout.venv, 'bin', 'nova-lxd-accel')
    python = os.path.join(layout.venv, 'bin', 'python')
    for path in (inventory, lines, gpu_flavors):
        if os.path.exists(path):
            os.remove(path)
    if not _json_of([tool, 'inventory', '--format', 'json',
                     '--config-file', compute_conf], inventory, log):
        print('nova-lxd-accel inventory failed: no accelerator flavors')
    # The same flavor recipes as the DevStack plugin, named sandbox.*.
    if os.path.exists(inventory) and os.path.exists(FLAVOR_RECIPES):
        with open(lines, 'w') as out:
            subprocess.run([python, FLAVOR_RECIPES, inventory, 'sandbox',
                            'none'], stdout=out, check=True)
    if os.path.exists(inventory):
        _json_of([tool, 'flavors', '--format', 'json', '--prefix', 'sandbox',
                  '--vcpus', '1', '--ram', '256', '--disk', '1',
                  '--config-file', compute_conf], gpu_flavors, log)
    simulated = hardware.host_name(layout) if hardware.active(layout) else ''
    provision('flavors', catalogue.PLAIN_FLAVOR, inventory, lines,
              catalogue.SECOND_FLAVOR, simulated, gpu_flavors)
