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

"""The gate's clock: each stage of tools/run-tests.sh, timed and budgeted.

Usage: ci_timings.py record FILE RUN STAGE SECONDS STATUS [FACT...]
       ci_timings.py tox FILE RUN PHASE RESULT_JSON [FACT...]
       ci_timings.py report FILE RUN BUDGETS WALL_SECONDS [--full]

``record`` appends one stage's line to FILE (tab-separated: run, stage,
the stage it runs inside or "-", seconds, status, facts). ``tox`` appends
one line per tox environment of a phase, read from tox's
``--result-json`` (its setup seconds among the facts). ``report`` prints
the run's table against BUDGETS and one ``CI-TIMINGS`` line; it warns
when a stage passes its budget by a quarter or the run's wall clock passes
WARN_TOTAL_S, and exits 1 when it passes FAIL_TOTAL_S with CI=true (never
with --full, whose budget only warns).

BUDGETS has one line per stage: ``NAME SECONDS WHERE``, WHERE being
``critical`` (a stage of the gate, one after another: their budgets add up
to the gate's), ``off-gate`` (a stage only ``run-tests.sh --full`` or
``-e`` runs) or the name of the stage it runs inside (a tox environment of
a phase). Any Python 3, standard library only: it runs before any venv
exists.
"""

import json
import os
import re
import sys

#: the gate's target and its hard limit under CI (the landing machine
#: gives 90 minutes; past 70 the run is already too close to it)
WARN_TOTAL_S = 45 * 60
FAIL_TOTAL_S = 70 * 60
#: a stage warns past its budget by this factor
OVER_FACTOR = 1.25

CRITICAL = 'critical'
OFF_GATE = 'off-gate'


class Budget(object):

    def __init__(self, name, seconds, where):
        self.name = name
        self.seconds = seconds
        self.where = where

    @property
    def critical(self):
        return self.where == CRITICAL


def parse_budgets(text):
    """The budget file's lines as {stage: Budget}; ValueError if wrong."""
    budgets = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split('#', 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        if len(fields) != 3 or not fields[1].isdigit():
            raise ValueError('line %d: expected "STAGE SECONDS WHERE", got '
                             '%r' % (number, line))
        name, seconds, where = fields[0], int(fields[1]), fields[2]
        if name in budgets:
            raise ValueError('line %d: stage %s has two budgets'
                             % (number, name))
        budgets[name] = Budget(name, seconds, where)
    for budget in budgets.values():
        if budget.where in (CRITICAL, OFF_GATE):
            continue
        parent = budgets.get(budget.where)
        if parent is None or parent.where not in (CRITICAL, OFF_GATE):
            raise ValueError('stage %s runs inside %s, which is not a '
                             'stage of the run in the budget file'
                             % (budget.name, budget.where))
    return budgets


def critical_path_seconds(budgets):
    return sum(b.seconds for b in budgets.values() if b.critical)


_STAGE = re.compile(r'^\s*stage\s+([\w.-]+)\s+(\S+)(?:\s+"\$(\w+)")?',
                    re.MULTILINE)
_ENVS = re.compile(r'^\s*(\w+_envs)=([\w.,-]+)\s*$', re.MULTILINE)


def script_stages(text):
    """What a run of the script times: {stage: the stage it runs in}.

    The script's own stages (``stage NAME FUNCTION ...``) map to None; the
    tox environments of a phase (``stage NAME tox_phase "$VAR"``, VAR
    assigned a comma-separated list, in any of its variants) to NAME.
    """
    lists = {}
    for var, envs in _ENVS.findall(text):
        lists.setdefault(var, set()).update(e for e in envs.split(',') if e)
    stages = {}
    for name, function, var in _STAGE.findall(text):
        stages[name] = None
        if function == 'tox_phase' and var:
            for env in lists.get(var, ()):
                stages[env] = name
    return stages


def budget_problems(stages, budgets):
    """What the budget file lacks or gets wrong for a script's stages."""
    problems = []
    for name, inside in sorted(stages.items()):
        budget = budgets.get(name)
        if budget is None:
            problems.append('%s has no budget line' % name)
        elif inside is None and budget.where not in (CRITICAL, OFF_GATE):
            problems.append('%s is a stage of the run, not a part of %s'
                            % (name, budget.where))
        elif inside is not None and budget.where != inside:
            problems.append('%s runs inside %s, its budget says %s'
                            % (name, inside, budget.where))
    for name in sorted(set(budgets) - set(stages)):
        problems.append('%s has a budget but the script never runs it'
                        % name)
    return problems


class Row(object):
    """One timed stage of a run."""

    def __init__(self, stage, inside, seconds, status, facts):
        self.stage = stage
        self.inside = inside        # '-' for a stage of the run itself
        self.seconds = seconds
        self.status = status
        self.facts = facts

    @property
    def in_series(self):
        return self.inside == '-'


def format_line(run, stage, seconds, status, facts=(), inside='-'):
    clean = [str(f).replace('\t', ' ').replace('\n', ' ') for f in facts]
    return '\t'.join([run, stage, inside, '%.1f' % float(seconds),
                      str(status), '; '.join(f for f in clean if f)]) + '\n'


def read_run(text, run):
    """The Rows of one run, in order."""
    rows = []
    for line in text.splitlines():
        fields = line.split('\t')
        if len(fields) < 5 or fields[0] != run:
            continue
        rows.append(Row(fields[1], fields[2], float(fields[3]), fields[4],
                        fields[5] if len(fields) > 5 else ''))
    return rows


def tox_rows(journal, phase_facts=()):
    """One (env, seconds, status, facts) per environment of a tox journal.

    Setup is what the environment spent before its commands: creating or
    checking its venv and installing into it.
    """
    rows = []
    for name, env in sorted((journal.get('testenvs') or {}).items()):
        result = env.get('result') or {}
        if not result:
            continue        # the packaging environment (.pkg)
        duration = float(result.get('duration') or 0.0)
        commands = sum(float(run.get('elapsed') or 0.0)
                       for run in env.get('test') or ())
        status = 'ok' if result.get('success') else (
            'skipped' if result.get('skipped') else
            'failed(%s)' % result.get('exit_code'))
        facts = ['setup %.0fs' % max(0.0, duration - commands),
                 'commands %.0fs' % commands] + list(phase_facts)
        rows.append((name, duration, status, '; '.join(facts)))
    return rows


def _minutes(seconds):
    return '%d:%02d' % (int(seconds) // 60, int(seconds) % 60)


def report(rows, budgets, wall, ci=False, full=False, out=sys.stdout):
    """Print the table and the summary line; the exit status.

    :param wall: the run's wall-clock seconds, start to end
    """
    warnings = []
    out.write('\n%-30s %8s %7s  %-16s %s\n' % (
        'stage', 'seconds', 'budget', 'status', 'facts (cold/warm)'))
    out.write('-' * 100 + '\n')
    # each stage of the run, then the parts that ran inside it
    ordered = []
    for row in rows:
        if row.in_series:
            ordered.append(row)
            ordered += [part for part in rows if part.inside == row.stage]
    ordered += [row for row in rows if row not in ordered]
    for row in ordered:
        budget = budgets.get(row.stage)
        mark = row.status
        if budget is None:
            warnings.append('stage %s has no budget line' % row.stage)
            mark += ' NO-BUDGET'
        elif row.seconds > budget.seconds * OVER_FACTOR:
            warnings.append('stage %s took %.0fs, over its budget of %ds by '
                            'more than %d%%' % (row.stage, row.seconds,
                                                budget.seconds,
                                                (OVER_FACTOR - 1) * 100))
            mark += ' OVER'
        out.write('%-30s %8.1f %7s  %-16s %s\n' % (
            ('' if row.in_series else '  ') + row.stage, row.seconds,
            '-' if budget is None else budget.seconds, mark, row.facts))
    out.write('-' * 100 + '\n')
    in_series = sum(row.seconds for row in rows if row.in_series)
    out.write('%-30s %8.1f %7d  wall clock %s, target %s\n' % (
        'stages in series', in_series, critical_path_seconds(budgets),
        _minutes(wall), _minutes(WARN_TOTAL_S)))
    if wall > WARN_TOTAL_S:
        warnings.append('the run took %s, over the gate\'s %s'
                        % (_minutes(wall), _minutes(WARN_TOTAL_S)))
    for warning in warnings:
        out.write('WARNING: %s\n' % warning)
    failed = [row.stage for row in rows if row.status not in ('ok',)]
    over = sum(1 for w in warnings if 'over its budget' in w)
    out.write('CI-TIMINGS wall=%ds (%s) target=%ds stages=%d over_budget=%d '
              'failed=%d%s\n' % (
                  wall, _minutes(wall), WARN_TOTAL_S, len(rows), over,
                  len(failed),
                  ' failed_stages=' + ','.join(failed) if failed else ''))
    if ci and not full and wall > FAIL_TOTAL_S:
        out.write('ERROR: the run took %s, past the %s a CI run may take '
                  '(CI=true)\n' % (_minutes(wall), _minutes(FAIL_TOTAL_S)))
        return 1
    return 0


def _read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except FileNotFoundError:
        return ''


def _append(path, text):
    with open(path, 'a') as handle:
        handle.write(text)


def main(argv, environ=os.environ, out=sys.stdout):
    if len(argv) >= 6 and argv[1] == 'record':
        _append(argv[2], format_line(argv[3], argv[4], argv[5],
                                     argv[6] if len(argv) > 6 else 'ok',
                                     argv[7:]))
        return 0
    if len(argv) >= 6 and argv[1] == 'tox':
        try:
            journal = json.loads(_read(argv[5]) or '{}')
        except ValueError:
            journal = {}
        for name, seconds, status, facts in tox_rows(journal, argv[6:]):
            _append(argv[2], format_line(argv[3], name, seconds, status,
                                         [facts], inside=argv[4]))
        return 0
    if len(argv) in (6, 7) and argv[1] == 'report':
        full = argv[6:] == ['--full']
        budgets = parse_budgets(_read(argv[4]))
        return report(read_run(_read(argv[2]), argv[3]), budgets,
                      float(argv[5]),
                      ci=environ.get('CI', '').lower() == 'true', full=full,
                      out=out)
    sys.stderr.write(__doc__.split('\n\n')[1] + '\n')
    return 2


if __name__ == '__main__':
    sys.exit(main(sys.argv))
