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

"""The memory the sandbox's cloud holds, one figure per service.

Usage: memory.py SANDBOX_DIR SERVICE...

Prints one line per running service, ``NAME PSS_KIB RSS_KIB``, then
``helpers PSS_KIB RSS_KIB`` and ``lxd PSS_KIB RSS_KIB``. ``tools/sandbox.sh
status`` and the benchmarks read these; any Python 3, standard library only.

A service counts its whole process tree (workers, children). The helpers
are the processes of the sandbox that leave their service's tree: Neutron's
privsep daemons (one per privsep context and agent, a full Python each),
dnsmasq and haproxy.

PSS (proportional set size, from ``/proc/PID/smaps_rollup``) is the figure
that adds up: a page that N processes share counts 1/N in each, so the sum
is the physical memory the cloud holds. The sum of RSS counts every shared
page (libpython, the C libraries, pages a fork shares) once per process; it
is printed beside it, and is the larger.
"""

import collections
import os
import sys

#: what a helper's command line contains (besides the sandbox directory)
HELPER_MARKERS = ('privsep-helper', 'dnsmasq', 'haproxy', 'keepalived')

Process = collections.namedtuple('Process', 'ppid rss_kib pss_kib comm')
Usage = collections.namedtuple('Usage', 'pss_kib rss_kib')


def _read(path):
    with open(path, 'rb') as handle:
        return handle.read().decode('utf-8', 'replace')


def _kib_fields(text, names):
    found = {}
    for line in text.splitlines():
        key, _, value = line.partition(':')
        if key in names:
            found[key] = int(value.split()[0])
    return found


def process_table(proc='/proc'):
    """Every process: ``{pid: Process}`` (kernel threads have RSS 0)."""
    table = {}
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        base = os.path.join(proc, entry)
        try:
            stat = _read(os.path.join(base, 'stat'))
            ppid = int(stat.rsplit(')', 1)[1].split()[1])
            comm = _read(os.path.join(base, 'comm')).strip()
            status = _kib_fields(_read(os.path.join(base, 'status')),
                                 ('VmRSS',))
            rss = status.get('VmRSS', 0)
            try:
                rollup = _kib_fields(
                    _read(os.path.join(base, 'smaps_rollup')), ('Pss',))
                pss = rollup.get('Pss', rss)
            except OSError:  # a kernel without smaps_rollup: RSS it is
                pss = rss
        except (OSError, IndexError, ValueError):
            continue  # it ended while we read it
        table[int(entry)] = Process(ppid, rss, pss, comm)
    return table


def owner(pid, roots, table):
    """The pid in ``roots`` that ``pid`` is or descends from, or None."""
    while pid > 1 and pid not in roots:
        process = table.get(pid)
        if process is None:
            return None
        pid = process.ppid
    return pid if pid in roots else None


def _sum(pids, table):
    return Usage(sum(table[pid].pss_kib for pid in pids),
                 sum(table[pid].rss_kib for pid in pids))


def service_pids(sandbox_dir, services):
    """``{name: pid}`` of the services whose pid file names a live pid."""
    pids = {}
    for name in services:
        path = os.path.join(sandbox_dir, 'run', name + '.pid')
        try:
            pids[name] = int(_read(path).split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return pids


def cmdline(pid, proc='/proc'):
    try:
        return _read(os.path.join(proc, str(pid), 'cmdline')).replace(
            '\0', ' ')
    except OSError:
        return ''


def report(sandbox_dir, services, proc='/proc', pids=None):
    """The memory of each running service, of the helpers and of LXD.

    :param pids: ``{name: pid}`` of the services, when the caller has
        checked them already; by default read from their pid files.

    :returns: ``(rows, helpers, lxd)``: ``rows`` a list of ``(name, Usage)``
        in the order of ``services``; ``helpers`` and ``lxd`` a Usage each.
    """
    table = process_table(proc)
    if pids is None:
        pids = service_pids(sandbox_dir, services)
    pids = {name: pid for name, pid in pids.items() if pid in table}
    # One walk up from each process: to the service whose tree holds it,
    # or, for a helper that left its service, to none.
    trees = {pid: [] for pid in pids.values()}
    helpers = []
    for pid in table:
        root = owner(pid, trees, table)
        if root is not None:
            trees[root].append(pid)
            continue
        args = cmdline(pid, proc)
        if sandbox_dir in args and any(marker in args
                                       for marker in HELPER_MARKERS):
            helpers.append(pid)
    rows = [(name, _sum(trees[pid], table)) for name, pid in pids.items()]
    lxd = [pid for pid, process in table.items()
           if process.comm in ('lxd', 'incusd')]
    return rows, _sum(helpers, table), _sum(lxd, table)


def main(argv=None, proc='/proc'):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 1:
        sys.exit(__doc__.splitlines()[2])
    rows, helpers, lxd = report(argv[0], argv[1:], proc)
    for name, usage in rows + [('helpers', helpers), ('lxd', lxd)]:
        print(name, usage.pss_kib, usage.rss_kib)
    return 0


if __name__ == '__main__':
    sys.exit(main())
