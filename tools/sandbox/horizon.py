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

"""Horizon for the sandbox (``up --with-horizon``).

Its own venv beside the cloud's (Horizon pins Django and its own
libraries; the cloud's venv stays as constraints.txt has it), its
``local_settings.py`` (written by configs.py with the other configuration,
linked where Horizon reads it), its static files, and the browser test
(``tools/sandbox-horizon-test.py`` in headless Chromium). Once asked for,
it stays on (``data/horizon/enabled``) until ``--without-horizon``.
Any Python 3, standard library only.
"""

import json
import os
import shutil
import subprocess

from . import catalogue
from . import install as install_module
from . import layout as layout_module

VERSION = '27.0.0'
#: nova-lxd-accel's plugin (nova_lxd_accel_dashboard) and its enabled file
PLUGIN_ENABLED = os.path.join(layout_module.REPO_DIR,
                              'nova_lxd_accel_dashboard', 'enabled',
                              '_9010_nova_lxd_accel_gpus.py')
BROWSER_TEST = os.path.join(layout_module.REPO_DIR, 'tools',
                            'sandbox-horizon-test.py')


def enabled(layout, choice):
    """On when asked for ('1'), off when refused ('0'), else as last left."""
    if choice in ('0', '1'):
        return choice == '1'
    return os.path.exists(os.path.join(layout.horizon_data, 'enabled'))


def _python(layout):
    return os.path.join(layout.horizon_venv, 'bin', 'python')


def _stamp_path(layout):
    return os.path.join(layout.horizon_venv, '.sandbox-installed')


def install(layout, environ):
    """Horizon VERSION in its venv, once per version and constraints."""
    os.makedirs(layout.horizon_data, exist_ok=True)
    open(os.path.join(layout.horizon_data, 'enabled'), 'a').close()
    constraints = environ['SANDBOX_CONSTRAINTS']
    # the same text as the shell kept: version, then the constraints' hash
    want = '%s\n%s\nplugin %s\n' % (
        VERSION, layout_module.digest_files([constraints]),
        layout_module.REPO_DIR)
    if layout_module.read_text(_stamp_path(layout)) == want:
        print('Horizon %s already installed' % VERSION)
        return
    if not os.access(_python(layout), os.X_OK):
        install_module.make_venv(layout.horizon_venv, environ,
                                 subprocess.check_call)
    pip = install_module.installer(layout.horizon_venv, environ)
    subprocess.run(pip + ['--upgrade', 'pip'], check=True)
    # selenium drives the browser test
    subprocess.run(pip + ['-c', constraints, 'horizon==%s' % VERSION,
                          'cheroot', 'selenium'], check=True)
    # the plugin from this checkout, editable: Horizon needs nothing else
    # of it (an operator's Horizon: pip install nova-lxd-accel[dashboard],
    # doc/source/admin/dashboard.rst)
    subprocess.run(pip + ['--no-deps', '-e', layout_module.REPO_DIR],
                   check=True)
    with open(_stamp_path(layout), 'w') as handle:
        handle.write(want)


def configure(layout):
    """Horizon's settings and static files.

    local_settings.py where Horizon reads it (a link to the 0600 file in
    etc/), then collectstatic and the offline compression Horizon
    documents for DEBUG = False, once per settings and install.
    """
    settings = os.path.join(layout.etc, 'horizon', 'local_settings.py')
    package = subprocess.run(
        [_python(layout), '-c', 'import os, openstack_dashboard; '
         'print(os.path.dirname(openstack_dashboard.__file__))'],
        stdout=subprocess.PIPE, text=True, check=True).stdout.strip()
    link = os.path.join(package, 'local', 'local_settings.py')
    if os.path.lexists(link):
        os.remove(link)
    os.symlink(settings, link)
    enabled = os.path.join(package, 'local', 'enabled',
                           os.path.basename(PLUGIN_ENABLED))
    if os.path.lexists(enabled):
        os.remove(enabled)
    os.symlink(PLUGIN_ENABLED, enabled)
    stamp = layout_module.digest_files([settings, _stamp_path(layout),
                                        PLUGIN_ENABLED])
    stamp_file = os.path.join(layout.horizon_data, 'static.stamp')
    if (layout_module.read_text(stamp_file) or '').strip() == stamp:
        print('static files up to date')
        return
    env = dict(os.environ,
               DJANGO_SETTINGS_MODULE='openstack_dashboard.settings')
    subprocess.run([_python(layout), '-m', 'django', 'collectstatic',
                    '--noinput', '--clear', '-v', '0'], env=env, check=True)
    subprocess.run([_python(layout), '-m', 'django', 'compress', '--force'],
                   env=env, check=True)
    with open(stamp_file, 'w') as handle:
        handle.write(stamp + '\n')


def turn_off(layout, stop):
    """Off until asked for again; ``stop`` stops the running Horizon."""
    path = os.path.join(layout.horizon_data, 'enabled')
    if os.path.exists(path):
        os.remove(path)
    stop()
    pid_file = os.path.join(layout.run, 'horizon.pid')
    if os.path.exists(pid_file):
        os.remove(pid_file)


def _proposals(layout):
    try:
        with open(os.path.join(layout.data, 'gpu-flavors.json')) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return []


def _asking(proposals, prefix):
    """The proposals asking one unit of a class starting with ``prefix``.

    One: a pool's ``.x2``/``.x4`` flavors need that many free cards.
    """
    return [p for p in proposals
            if any(key.startswith('resources:' + prefix) and value == '1'
                   for key, value in p['extra_specs'].items())]


def test_flavor(layout):
    """The flavor the browser test boots.

    A MIG slice when nova-lxd-accel flavors proposed one, else its first;
    the small flavor on a host without GPUs.
    """
    proposals = _proposals(layout)
    mig = _asking(proposals, 'CUSTOM_MIG_')
    if mig or proposals:
        return (mig or proposals)[0]['name']
    return catalogue.PLAIN_FLAVOR


def gpu_plugin_arguments(layout):
    """The browser test's arguments for the GPU plugin's steps, or [].

    On a simulated host with a MIG flavor and a whole-GPU flavor: the
    whole-GPU flavor, the words the MIG flavor's Accelerators tab must say
    (its profile, as the flavor's EGI key ``Accelerator:Model`` ends:
    ``... MIG 1g.10gb``), and the simulated nvidia-smi's folder.
    """
    proposals = _proposals(layout)
    mig = _asking(proposals, 'CUSTOM_MIG_')
    whole = _asking(proposals, 'PGPU')
    if not (mig and whole) or not os.path.isdir(layout.hardware):
        return []
    model = mig[0]['extra_specs'].get('Accelerator:Model', '')
    words = ' '.join(model.split()[-2:])
    return ['--gpu-flavor', whole[0]['name'], '--mig-words', words,
            '--hardware-dir', layout.hardware]


def browser_test(layout, secrets):
    """The browser test against the running Horizon: its exit status."""
    screenshots = os.path.join(layout.horizon_data, 'screenshots')
    shutil.rmtree(screenshots, ignore_errors=True)
    env = dict(os.environ, SANDBOX_DEMO_PASSWORD=secrets['DEMO_PASSWORD'],
               SANDBOX_ADMIN_PASSWORD=secrets['ADMIN_PASSWORD'])
    return subprocess.run(
        [_python(layout), BROWSER_TEST,
         '--url', 'http://127.0.0.1:%d' % layout.ports['HORIZON'],
         '--flavor', test_flavor(layout),
         '--image', catalogue.IMAGE_NAME,
         '--screenshots', screenshots] + gpu_plugin_arguments(layout),
        env=env).returncode
