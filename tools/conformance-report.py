#!/usr/bin/env python3
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

"""Tempest results of tools/sandbox-tempest.sh, counted and published.

``conformance-report.py totals RESULT.subunit``
    prints the counts, the failed tests and the skipped tests with their
    reasons, as JSON (run with the tempest venv's Python: it reads the
    stream with python-subunit).
``conformance-report.py page RESULTS_DIR OUT.rst [TRIAGE]``
    writes the conformance page from every ``<subset>.json`` (and its
    ``<subset>.hosts``: how many compute hosts ran it), ``features.txt``
    and ``excluded.txt`` of ``RESULTS_DIR`` (standard library only), so
    the numbers on the page always come from a run, never from a hand;
    each failure gets its reason from ``TRIAGE`` (default
    ``tools/tempest-triage.txt``), each skip from
    ``tools/tempest-skips.txt``. An ``adhoc`` run (``--regex``) is left
    out.
"""

import collections
import datetime
import glob
import json
import os
import sys


def totals(path):
    import subunit
    import testtools

    tests = {}

    def on_test(test):
        tests[test['id']] = test

    result = testtools.StreamToDict(on_test)
    result.startTestRun()
    with open(path, 'rb') as stream:
        subunit.ByteStreamToStreamResult(
            stream, non_subunit_name='stdout').run(result)
    result.stopTestRun()
    out = {'passed': 0, 'failed': 0, 'skipped': 0, 'failures': [],
           'skips': {}}
    for test_id, test in sorted(tests.items()):
        if test_id.startswith('setUpClass') or \
                test_id.startswith('tearDownClass'):
            name = test_id
        else:
            name = test_id.split('[', 1)[0]
        status = test['status']
        if status in ('success', 'xfail'):
            out['passed'] += 1
        elif status == 'skip':
            out['skipped'] += 1
            reason = test['details'].get('reason')
            out['skips'][name] = (reason.as_text().strip()
                                  if reason is not None else '')
        elif status in ('fail', 'uxsuccess'):
            out['failed'] += 1
            out['failures'].append(name)
    return out


def _table(rows):
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    rule = '  '.join('=' * w for w in widths)
    lines = [rule]
    for index, row in enumerate(rows):
        lines.append('  '.join(str(c).ljust(w)
                               for c, w in zip(row, widths)).rstrip())
        if index == 0:
            lines.append(rule)
    lines.append(rule)
    return lines


def _commented_regexes(path):
    """[(regex, reason)] of a file of regexes, each after its comment."""
    out = []
    if not os.path.exists(path):
        return out
    reason = []
    with open(path) as handle:
        for line in handle:
            line = line.strip()
            if not line:
                reason = []
            elif line.startswith('#'):
                reason.append(line.lstrip('# '))
            else:
                out.append((line, ' '.join(reason)))
    return out


REPRODUCE = [
    'Reproduce', '=========', '',
    'The ``compute`` row, on two hosts (about 50 minutes on two cores)::',
    '',
    '    tools/sandbox.sh up --hosts 2',
    '    tools/sandbox.sh image debian',
    '    tools/sandbox-tempest.sh --subset compute',
    '    python3 tools/conformance-report.py page \\',
    '        /var/tmp/nova-lxd-accel-sandbox/tempest/results \\',
    '        doc/source/reference/conformance.rst',
    '',
    '``--subset ci`` and ``--subset multinode`` give the other rows; '
    '``.ci/run`` runs both (not ``compute``).', '']


def page(results_dir, out_path, triage_path=None, skips_path=None):
    import re

    here = os.path.dirname(os.path.abspath(__file__))
    triage = [(re.compile(regex), reason) for regex, reason in
              _commented_regexes(triage_path or os.path.join(
                  here, 'tempest-triage.txt'))]
    skip_reasons = [(re.compile(regex), reason) for regex, reason in
                    _commented_regexes(skips_path or os.path.join(
                        here, 'tempest-skips.txt'))]
    runs, hosts = {}, {}
    for path in sorted(glob.glob(os.path.join(results_dir, '*.json'))):
        name = os.path.basename(path)[:-5]
        if name == 'adhoc':
            continue
        with open(path) as handle:
            runs[name] = json.load(handle)
        hosts_path = os.path.join(results_dir, name + '.hosts')
        if os.path.exists(hosts_path):
            with open(hosts_path) as handle:
                hosts[name] = handle.read().strip()
    features = []
    features_path = os.path.join(results_dir, 'features.txt')
    if os.path.exists(features_path):
        with open(features_path) as handle:
            for line in handle:
                words = line.split(None, 2)
                reason = words[2].lstrip('# ').strip() \
                    if len(words) > 2 else ''
                features.append((words[0], words[1], reason))
    excluded = _commented_regexes(os.path.join(results_dir, 'excluded.txt'))
    title = 'Tempest conformance'
    lines = ['=' * len(title), title, '=' * len(title), '',
             'Generated by ``tools/conformance-report.py page`` from the '
             'results of ``tools/sandbox-tempest.sh`` (tempest 47.0.0 '
             'against the sandbox) on %s. Do not edit by hand: run the '
             'subsets and regenerate.' % datetime.date.today().isoformat(),
             '', 'Results', '=======', '']
    rows = [('subset', 'hosts', 'passed', 'failed', 'skipped')]
    for name, run in sorted(runs.items()):
        rows.append((name, hosts.get(name, '-'), run['passed'],
                     run['failed'], run['skipped']))
    lines += _table(rows) if len(rows) > 1 else ['No run recorded.']
    lines += ['', '``ci``: compute and image API tests tagged smoke (run '
              'by ``.ci/run``); ``compute``: all of ``tempest.api.compute`` '
              'plus the image and network API smoke tests; '
              '``multinode``: cold migration and the multi-node '
              'scheduling tests, on two compute hosts (``tools/sandbox.sh '
              'up --hosts 2``: a second nova-compute on its own daemon). '
              'Validation '
              'is on unless the features below say otherwise: the '
              'servers boot the sandbox\'s Debian 12 cloud-init image and '
              'tempest checks them over SSH through a floating IP.', '']
    lines += REPRODUCE
    if features:
        lines += ['Features', '========', '',
                  'As ``tools/sandbox-tempest.sh`` sets them in '
                  '``tempest.conf``:', '']
        lines += _table([('option', 'value', 'why')] + [
            ('``%s``' % f, v, r or '-') for f, v, r in features])
        lines.append('')
    if excluded:
        lines += ['Excluded', '========', '',
                  'Tests left out of every run (``tools/tempest-exclude.txt``'
                  '), with the reason:', '']
        lines += ['* ``%s``: %s' % (regex.lstrip('^').replace('\\', ''),
                                    reason or '-')
                  for regex, reason in excluded]
        lines.append('')
    for name, run in sorted(runs.items()):
        if run['failures']:
            lines += ['Failed in ``%s``' % name,
                      '-' * (len('Failed in ``%s``' % name)), '']
            for test in run['failures']:
                why = [r for regex, r in triage if regex.search(test)]
                lines.append('* ``%s``: %s' % (
                    test, why[0] if why else 'not triaged'))
            lines.append('')
        if run['skips']:
            by_reason = collections.defaultdict(list)
            for test, reason in sorted(run['skips'].items()):
                by_reason[reason or '(no reason given)'].append(test)
            head = 'Skipped in ``%s``, by reason' % name
            lines += [head, '-' * len(head), '']
            for reason, tests in sorted(by_reason.items(),
                                        key=lambda i: (-len(i[1]), i[0])):
                why = [r for regex, r in skip_reasons if regex.search(reason)]
                lines.append('* %s (%d): %s. Why: %s' % (
                    ' '.join(reason.split()).rstrip('.'), len(tests),
                    ', '.join('``%s``' % t.rsplit('.', 1)[-1].strip(')')
                              for t in tests[:8]) +
                    (', ...' if len(tests) > 8 else ''),
                    why[0] if why else 'not explained'))
            lines.append('')
    with open(out_path, 'w') as handle:
        handle.write('\n'.join(lines).rstrip() + '\n')


def main(argv):
    if len(argv) == 2 and argv[0] == 'totals':
        json.dump(totals(argv[1]), sys.stdout, indent=1, sort_keys=True)
        sys.stdout.write('\n')
        return 0
    if len(argv) in (3, 4) and argv[0] == 'page':
        page(*argv[1:])
        return 0
    sys.stderr.write(__doc__)
    return 2


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
