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

"""tools/conformance-report.py: the page comes from the results only."""

import importlib.util
import json
import os

import fixtures
import testtools

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


def _module():
    spec = importlib.util.spec_from_file_location(
        'conformance_report', os.path.join(ROOT, 'tools',
                                           'conformance-report.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class PageTest(testtools.TestCase):

    def test_counts_features_exclusions_failures_and_skips(self):
        results = self.useFixture(fixtures.TempDir()).path
        with open(os.path.join(results, 'ci.json'), 'w') as f:
            json.dump({'passed': 17, 'failed': 1, 'skipped': 2,
                       'failures': ['tempest.api.compute.a.B.test_c'],
                       'skips': {'tempest.api.compute.x.Y.test_z':
                                 'Volume service not enabled.',
                                 'tempest.api.compute.x.Y.test_q':
                                 'Something new.'}}, f)
        with open(os.path.join(results, 'ci.hosts'), 'w') as f:
            f.write('2\n')
        with open(os.path.join(results, 'adhoc.json'), 'w') as f:
            json.dump({'passed': 1, 'failed': 0, 'skipped': 0,
                       'failures': [], 'skips': {}}, f)
        with open(os.path.join(results, 'features.txt'), 'w') as f:
            f.write('    compute-feature-enabled.vnc_console false  '
                    '# containers have no graphical console\n')
        with open(os.path.join(results, 'excluded.txt'), 'w') as f:
            f.write('# header\n\n# sandbox gap: no networking\n'
                    '^tempest\\.api\\.compute\\.t\\.T\\.test_addr\n')
        triage = os.path.join(results, 'triage.txt')
        with open(triage, 'w') as f:
            f.write('# sandbox gap: no network\n^tempest\\.api\\.compute'
                    '\\.a\\.\n')
        out = os.path.join(results, 'page.rst')
        self.assertEqual(0, _module().main(['page', results, out, triage]))
        with open(out) as f:
            page = f.read()
        self.assertIn('ci      2      17      1       2', page)
        self.assertNotIn('adhoc', page)
        self.assertIn('tools/sandbox-tempest.sh --subset compute', page)
        self.assertIn('``compute-feature-enabled.vnc_console``  false  '
                      'containers have no graphical console', page)
        self.assertIn('* ``tempest.api.compute.t.T.test_addr``: sandbox '
                      'gap: no networking', page)
        self.assertIn('* ``tempest.api.compute.a.B.test_c``: sandbox gap: '
                      'no network', page)
        # each skip with the project's reason, or a flag that it has none
        self.assertIn('* Volume service not enabled (1): ``test_z``. Why: '
                      'No Cinder in the sandbox', page)
        self.assertIn('* Something new (1): ``test_q``. Why: not explained',
                      page)

    def test_usage(self):
        self.assertEqual(2, _module().main([]))
