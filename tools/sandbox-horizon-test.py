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

"""Horizon in a real browser against the sandbox (headless Chromium).

Run by ``tools/sandbox.sh horizon-test`` in Horizon's venv (selenium),
with Debian's ``chromium`` and ``chromium-driver``. As a cloud user would:

1. logs in as the sandbox's ``demo`` user;
2. opens Project > Compute > Instances, Launch Instance; names the server,
   picks the image and the flavor in the wizard's tables, launches;
3. waits until the instances table shows it Active, opens its page;
4. deletes it and waits until it is gone;
5. logs in as ``admin``, opens the flavor's Update Metadata dialog and
   checks that the project's Glance metadata definitions (the ``lxd:``
   keys, namespace "LXD Container Options") are offered with their
   readable labels.

On a simulated GPU host (``--gpu-flavor`` given), nova-lxd-accel's plugin
too, between steps 3 and 4:

* ``demo`` also launches a whole-GPU server; the MIG server's
  Accelerators tab says in words what its flavor asked for, and that
  which device it got is for those allowed to read diagnostics;
* ``demo`` gets no fleet data from Admin > Compute > GPUs;
* ``admin``'s GPUs panel shows each server on a unit of the right class,
  with the host's counts; the MIG server's page, as admin, names the
  device it got;
* a process left on the whole GPU (written into the simulated host's
  ``compute-apps.csv``) holds it after its server is deleted: the panel
  shows it "release pending"; once the process is gone it is healthy and
  free again.

A screenshot of each step is written to ``--screenshots``. Exit status 0
when every step passed; otherwise 1 with the step that failed.
"""

import argparse
import os
import sys
import time

from selenium.common import exceptions
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support import ui

LXD_NAMESPACE = 'LXD Container Options'
# Labels of lxd: keys in etc/glance/metadefs/compute-lxd.json that no
# flavor of the sandbox sets (a set key leaves the Available column).
LXD_LABELS = ('Process Limit', 'Nested Containers')


class Step(Exception):
    pass


class HorizonTest(object):

    def __init__(self, args):
        self.args = args
        options = webdriver.ChromeOptions()
        options.binary_location = args.chromium
        for flag in ('--headless=new', '--no-sandbox', '--disable-gpu',
                     '--disable-dev-shm-usage', '--window-size=1400,1000'):
            options.add_argument(flag)
        service = webdriver.ChromeService(executable_path=args.chromedriver)
        self.browser = webdriver.Chrome(options=options, service=service)
        self.browser.implicitly_wait(0)
        self.shot = 0
        os.makedirs(args.screenshots, exist_ok=True)

    # -- helpers -------------------------------------------------------------

    def say(self, text):
        print('[horizon] %s' % text, flush=True)

    def screenshot(self, name):
        self.shot += 1
        path = os.path.join(self.args.screenshots,
                            '%02d-%s.png' % (self.shot, name))
        self.browser.save_screenshot(path)
        if name == 'failed':
            # the page as the browser had it, to fix a locator by
            with open(path[:-len('.png')] + '.html', 'w') as page:
                page.write(self.browser.page_source)
        return path

    def wait(self, condition, what, timeout=60):
        try:
            return ui.WebDriverWait(self.browser, timeout).until(condition)
        except exceptions.TimeoutException:
            path = self.screenshot('failed')
            raise Step('%s: not seen in %ss (screenshot %s)'
                       % (what, timeout, path))

    def visible(self, xpath, what, timeout=60):
        return self.wait(ec.visibility_of_element_located((By.XPATH, xpath)),
                         what, timeout)

    def click(self, xpath, what, timeout=60):
        deadline = time.monotonic() + timeout
        while True:
            element = self.wait(
                ec.element_to_be_clickable((By.XPATH, xpath)), what,
                max(1, int(deadline - time.monotonic())))
            self.browser.execute_script('arguments[0].scrollIntoView(true);',
                                        element)
            try:
                element.click()
                return element
            except (exceptions.ElementClickInterceptedException,
                    exceptions.StaleElementReferenceException) as error:
                # "Clickable" means visible and enabled, not uncovered: a
                # dialog still fading in (Bootstrap's modal) or Angular
                # redrawing the tree takes the click. Try again.
                if time.monotonic() > deadline:
                    path = self.screenshot('failed')
                    raise Step('%s: could not be clicked in %ss: %s '
                               '(screenshot %s)' % (what, timeout,
                                                    error.msg, path))
                time.sleep(0.5)

    def open(self, path):
        self.browser.get(self.args.url.rstrip('/') + path)

    # -- steps ---------------------------------------------------------------

    def login(self, user, password):
        self.browser.delete_all_cookies()
        self.open('/auth/login/')
        self.visible('//input[@id="id_username"]', 'the login form')
        self.browser.find_element(By.ID, 'id_username').send_keys(user)
        self.browser.find_element(By.ID, 'id_password').send_keys(password)
        self.screenshot('login-%s' % user)
        self.click('//button[@type="submit"]', 'the Sign In button')
        self.visible('//*[contains(@class, "navbar")]//*[contains('
                     'normalize-space(.), "%s")]' % user,
                     'the page after login as %s' % user)
        self.say('logged in as %s' % user)

    def allocate(self, text, what):
        """Click the up arrow of the Available row named ``text``.

        Horizon's transfer table: the arrow is the row's action button
        (``fa-arrow-up`` on the button itself; allocated rows have
        ``fa-arrow-down``).
        """
        self.click('//transfer-table//tr[td[normalize-space(.)="%s"]]'
                   '//button[contains(@class, "fa-arrow-up")]' % text, what)

    def next_step(self):
        self.click('//div[contains(@class, "modal-footer")]//button['
                   'contains(@class, "next")]', 'the Next button')

    def launch(self, name):
        self.open('/project/instances/')
        self.click('//a[@id="instances__action_launch-ng"] | //a[contains('
                   'normalize-space(.), "Launch Instance")]',
                   'the Launch Instance button')
        name_input = self.visible('//input[@id="name"]',
                                  'the wizard\'s instance name field')
        name_input.send_keys(name)
        self.screenshot('launch-details')
        self.next_step()
        self.allocate(self.args.image, 'image %s in Source' % self.args.image)
        self.screenshot('launch-source')
        self.next_step()
        self.allocate(self.args.flavor,
                      'flavor %s in Flavor' % self.args.flavor)
        self.screenshot('launch-flavor')
        self.click('//div[contains(@class, "modal-footer")]//button['
                   'contains(@class, "finish")]',
                   'the Launch Instance button of the wizard')
        self.wait(ec.invisibility_of_element_located(
            (By.XPATH, '//div[contains(@class, "modal-footer")]//button['
                       'contains(@class, "finish")]')), 'the wizard closing')
        self.say('launched %s (%s, %s)' % (name, self.args.image,
                                           self.args.flavor))

    def row(self, name):
        return ('//table[@id="instances"]//tr[.//a[normalize-space(.)="%s"]]'
                % name)

    def wait_status(self, name, status, timeout=180):
        deadline = time.monotonic() + timeout
        seen = None
        while time.monotonic() < deadline:
            self.open('/project/instances/')
            try:
                cells = self.browser.find_elements(
                    By.XPATH, self.row(name) + '/td')
                seen = ' | '.join(c.text for c in cells)
                if any(c.text.strip() == status for c in cells):
                    return
                if any(c.text.strip() == 'Error' for c in cells):
                    raise Step('%s went to Error: %s' % (name, seen))
            except exceptions.StaleElementReferenceException:
                pass
            time.sleep(2)
        path = self.screenshot('failed')
        raise Step('%s not %s in %ss (row: %s; screenshot %s)'
                   % (name, status, timeout, seen, path))

    def open_instance(self, name):
        self.open('/project/instances/')
        self.click(self.row(name) + '//a[normalize-space(.)="%s"]' % name,
                   'the link to %s' % name)
        self.visible('//*[contains(normalize-space(.), "Overview")]',
                     'the page of %s' % name)
        self.screenshot('instance-page')
        self.say('opened the page of %s' % name)

    def delete(self, name):
        self.open('/project/instances/')
        # the themed checkbox: its label takes the click, the input is hidden
        self.click(self.row(name) + '//td[contains(@class, '
                   '"multi_select_column")]//label',
                   'the checkbox of %s' % name)
        self.click('//button[@id="instances__action_delete"]',
                   'the Delete Instances button')
        self.screenshot('delete-confirm')
        self.click('//div[contains(@class, "modal-footer")]//*[contains('
                   '@class, "btn-danger")]', 'the confirmation button')
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            self.open('/project/instances/')
            if not self.browser.find_elements(By.XPATH, self.row(name)):
                self.screenshot('deleted')
                self.say('deleted %s' % name)
                return
            time.sleep(2)
        path = self.screenshot('failed')
        raise Step('%s still listed 120 s after delete (screenshot %s)'
                   % (name, path))

    def flavor_metadata(self, flavor):
        self.open('/admin/flavors/')
        row = ('//table[@id="flavors"]//tr[td[normalize-space(.)="%s"]]'
               % flavor)
        self.click(row + '//a[contains(@class, "dropdown-toggle")] | ' +
                   row + '//button[contains(@class, "dropdown-toggle")]',
                   'the actions menu of flavor %s' % flavor)
        self.click(row + '//a[contains(normalize-space(.), '
                   '"Update Metadata")]', 'Update Metadata')
        self.visible('//*[contains(normalize-space(.), "%s")]'
                     % LXD_NAMESPACE,
                     'namespace "%s" in the metadata dialog' % LXD_NAMESPACE)
        self.click('//*[contains(@class, "modal")]//span[normalize-space(.)'
                   '="%s"] | //*[contains(@class, "modal")]//li[contains('
                   'normalize-space(.), "%s")]//*[contains(@class, '
                   '"fa-chevron")]' % (LXD_NAMESPACE, LXD_NAMESPACE),
                   'the namespace "%s"' % LXD_NAMESPACE)
        for label in LXD_LABELS:
            self.visible('//*[contains(@class, "modal")]//*[normalize-space('
                         '.)="%s"]' % label, 'the label "%s"' % label)
        self.screenshot('flavor-metadata')
        self.say('flavor %s: metadata dialog offers "%s" with %s'
                 % (flavor, LXD_NAMESPACE, ', '.join(LXD_LABELS)))

    # -- nova-lxd-accel's plugin ---------------------------------------------

    def instance_id(self, name):
        link = self.visible(self.row(name) + '//a[normalize-space(.)="%s"]'
                            % name, 'the link to %s' % name)
        return link.get_attribute('href').rstrip('/').split('/')[-1]

    def accelerators_tab(self, page, name, asked, device):
        """A server's page: its Accelerators tab says ``asked``.

        Then the device line (``device`` True), or the note for those who
        may not see it.
        """
        # the tab by its URL (Horizon's ?tab=), as a bookmark would
        self.open(page + '?tab=instance_details__accelerators')
        self.visible('//div[@id="nla-accelerators"]//div[@class="nla-asked"'
                     ' and contains(normalize-space(.), "%s")]' % asked,
                     '"%s" in the Accelerators tab of %s' % (asked, name))
        if device:
            self.visible('//div[@id="nla-accelerators"]//div[@class='
                         '"nla-device"]', 'the device %s got' % name)
        else:
            self.visible('//div[@id="nla-accelerators"]//div[@class='
                         '"nla-device-note" and contains(., "diagnostics")]',
                         'the note on who may see the device')
            if self.browser.find_elements(
                    By.XPATH, '//div[@class="nla-device"]'):
                raise Step('a user without the diagnostics policy was shown '
                           'the device %s got' % name)
        self.screenshot('accelerators-%s' % ('admin' if device else 'user'))
        self.say('%s: Accelerators tab says "%s"%s' % (
            name, asked, ' and names its device' if device else ''))

    def gpus_refused(self):
        """A user without admin rights gets no fleet data."""
        self.open('/admin/gpus/')
        self.wait(lambda b: b.execute_script(
            'return document.readyState') == 'complete', 'the page')
        time.sleep(1)
        self.screenshot('gpus-as-user')
        leaked = self.browser.find_elements(
            By.XPATH, '//*[contains(@class, "nla-card") or contains(@class, '
                      '"nla-host")]')
        refused = self.browser.find_elements(
            By.XPATH, '//*[contains(normalize-space(.), "not authorized")]')
        if leaked or not (refused or '/admin/gpus' not in
                          self.browser.current_url):
            raise Step('demo, without admin rights, was not refused the GPUs '
                       'panel (%s, %d fleet elements)'
                       % (self.browser.current_url, len(leaked)))
        self.say('demo gets no GPU fleet (%s)' % self.browser.current_url)

    def card_of(self, server_id):
        return ('//tr[contains(@class, "nla-card")][.//div[@data-server="%s"]]'
                % server_id)

    def gpus_panel(self, servers):
        """Each server on a card whose class of its prefix counts it.

        :param servers: id -> (name, resource class prefix).
        :returns: id -> PCI address of its card.
        """
        self.open('/admin/gpus/')
        found = {}
        for server_id, (name, rc_prefix) in servers.items():
            row = self.visible(self.card_of(server_id),
                               'the card holding %s in the GPUs panel' % name)
            used = [c for c in row.find_elements(
                By.XPATH, './/div[contains(@class, "nla-class")]')
                if c.get_attribute('data-rc').startswith(rc_prefix) and
                int(c.get_attribute('data-used')) >= 1]
            if not used:
                path = self.screenshot('failed')
                raise Step('%s is on %s but no %s* class counts it used '
                           '(screenshot %s)' % (
                               name, row.get_attribute('data-provider'),
                               rc_prefix, path))
            found[server_id] = row.get_attribute('data-pci')
        in_use = self.browser.find_elements(
            By.XPATH, '//div[contains(@class, "nla-bar")]/div[@data-kind='
                      '"in_use"]')
        if sum(int(e.get_attribute('data-count')) for e in in_use) < len(
                servers):
            raise Step('the hosts\' bars count fewer units in use than '
                       'the %d servers' % len(servers))
        self.screenshot('gpus-panel')
        self.say('GPUs panel: %s' % ', '.join(
            '%s on %s' % (servers[i][0], pci) for i, pci in found.items()))
        return found

    def leave_process(self, pci):
        """A compute process on GPU ``pci`` in the simulated answers.

        As if one outlived its container.
        """
        path = os.path.join(self.args.hardware_dir, 'compute-apps.csv')
        with open(path) as handle:
            self.apps_before = handle.read()
        bus_id = '0000' + pci if len(pci.split(':')[0]) == 4 else pci
        line = ('2026/11/27 12:00:00.000, NVIDIA A100-SXM4-80GB, %s, '
                '1320921000001, GPU-leftover, 4242, python3, 1024 MiB\n'
                % bus_id)
        with open(path, 'w') as handle:
            handle.write(self.apps_before.rstrip('\n') + '\n' + line)
        self.say('left a process on %s (%s)' % (pci, path))

    def clear_processes(self):
        path = os.path.join(self.args.hardware_dir, 'compute-apps.csv')
        with open(path, 'w') as handle:
            handle.write(self.apps_before)

    def card_state(self, pci, state, timeout=180):
        xpath = ('//tr[contains(@class, "nla-card") and @data-pci="%s" and '
                 '@data-state="%s"]' % (pci, state))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.open('/admin/gpus/')
            if self.browser.find_elements(By.XPATH, xpath):
                return
            time.sleep(3)
        path = self.screenshot('failed')
        raise Step('GPU %s not "%s" in the GPUs panel within %ss '
                   '(screenshot %s)' % (pci, state, timeout, path))

    def gpu_plugin(self, mig_name):
        """The plugin's steps (see the module help)."""
        whole = 'horizon-gpu-%d' % os.getpid()
        flavor = self.args.flavor
        self.args.flavor = self.args.gpu_flavor
        try:
            self.launch(whole)
        finally:
            self.args.flavor = flavor
        self.wait_status(whole, 'Active')
        self.open('/project/instances/')
        ids = {self.instance_id(mig_name): (mig_name, 'CUSTOM_MIG_'),
               self.instance_id(whole): (whole, 'PGPU')}
        mig_id = [i for i, v in ids.items() if v[0] == mig_name][0]
        whole_id = [i for i, v in ids.items() if v[0] == whole][0]
        self.accelerators_tab('/project/instances/%s/' % mig_id, mig_name,
                              self.args.mig_words, device=False)
        self.gpus_refused()
        self.login('admin', os.environ['SANDBOX_ADMIN_PASSWORD'])
        pcis = self.gpus_panel(ids)
        self.accelerators_tab('/admin/instances/%s/detail' % mig_id,
                              mig_name, self.args.mig_words, device=True)
        self.leave_process(pcis[whole_id])
        try:
            self.login('demo', os.environ['SANDBOX_DEMO_PASSWORD'])
            self.delete(whole)
            self.login('admin', os.environ['SANDBOX_ADMIN_PASSWORD'])
            self.card_state(pcis[whole_id], 'release pending')
            self.screenshot('gpus-release-pending')
            self.say('GPU %s is release pending while a process is left on '
                     'it' % pcis[whole_id])
        finally:
            self.clear_processes()
        self.card_state(pcis[whole_id], 'healthy')
        self.screenshot('gpus-released')
        self.say('GPU %s is healthy and free again once the process is '
                 'gone' % pcis[whole_id])
        self.login('demo', os.environ['SANDBOX_DEMO_PASSWORD'])

    def run(self):
        name = 'horizon-%d' % os.getpid()
        self.login('demo', os.environ['SANDBOX_DEMO_PASSWORD'])
        self.launch(name)
        self.wait_status(name, 'Active')
        self.screenshot('active')
        self.say('%s is Active' % name)
        if self.args.gpu_flavor:
            self.gpu_plugin(name)
        self.open_instance(name)
        self.delete(name)
        self.login('admin', os.environ['SANDBOX_ADMIN_PASSWORD'])
        self.flavor_metadata(self.args.flavor)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--url', required=True)
    parser.add_argument('--image', default='lxd-tiny')
    parser.add_argument('--flavor', default='sandbox.small')
    parser.add_argument('--screenshots', required=True)
    parser.add_argument('--chromium', default='/usr/bin/chromium')
    parser.add_argument('--chromedriver', default='/usr/bin/chromedriver')
    parser.add_argument('--gpu-flavor',
                        help='a whole-GPU flavor: run the GPU plugin steps')
    parser.add_argument('--mig-words',
                        help='what the MIG flavor\'s Accelerators tab must '
                             'say, e.g. "MIG 1g.10gb"')
    parser.add_argument('--hardware-dir',
                        help='the simulated host\'s nvidia-smi answers')
    args = parser.parse_args(argv)
    test = HorizonTest(args)
    started = time.monotonic()
    try:
        test.run()
    except Step as failure:
        print('[horizon] FAILED: %s' % failure, file=sys.stderr)
        return 1
    finally:
        test.browser.quit()
    print('[horizon] PASSED in %.0fs; screenshots in %s'
          % (time.monotonic() - started, args.screenshots))
    return 0


if __name__ == '__main__':
    sys.exit(main())
