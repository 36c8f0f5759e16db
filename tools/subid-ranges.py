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

"""Give LXD and Incus on one host their own subordinate uid/gid ranges.

Both daemons run as root and take the ``root:`` ranges of /etc/subuid and
/etc/subgid as the host ids they map containers to. Debian's packages
each add a ``root:`` range when none is there, so the order of
installation decides what a host ends up with:

* lxd, then incus: one ``root:`` range that both daemons use: they work,
  but LXD and Incus containers share the same host uids;
* incus, then lxd: two ``root:`` ranges (lxd's preinst appends one after
  Incus's); a daemon started then maps both at container id 0 and every
  container start fails with ``newuidmap: write to uid_map failed:
  Invalid argument``.

This script leaves one ``root:`` range per file in /etc/subuid and
/etc/subgid (the LXD one: the range ``_lxd`` has, else the first), and
writes DIR/subuid and DIR/subgid with one ``root:`` range for Incus that
overlaps nothing in the host files: the ``root:`` range it removed when
there was one (Incus's package made it), else a new one after every range
listed. tools/incus-up.sh starts incusd in a mount namespace of its own
with those two files bind-mounted over /etc/subuid and /etc/subgid.

Idempotent: a second run changes nothing. Nothing is rewritten when the
files are already right, so a running daemon's range never changes under
it (LXD and Incus read these files only when they start).

    subid-ranges.py --host-only          # only fix /etc/subuid, /etc/subgid
    subid-ranges.py DIR                  # and write DIR/subuid, DIR/subgid
"""

import argparse
import os
import sys
import tempfile

#: Incus's recommended size (https://linuxcontainers.org/incus/docs/main/
#: installing/): enough for isolated idmaps of many containers.
INCUS_COUNT = 1000000000
FIRST_ID = 1000000
LAST_ID = 2 ** 32 - 2


def parse(path):
    """[(name, start, count) or raw line] in file order."""
    entries = []
    if not os.path.exists(path):
        return entries
    with open(path) as handle:
        for line in handle.read().splitlines():
            fields = line.split(':')
            if (len(fields) == 3 and not line.startswith('#')
                    and fields[1].isdigit() and fields[2].isdigit()):
                entries.append((fields[0], int(fields[1]), int(fields[2])))
            else:
                entries.append(line)
    return entries


def render(entries):
    return ''.join(
        ('%s:%d:%d\n' % entry) if isinstance(entry, tuple) else entry + '\n'
        for entry in entries)


def write(path, text):
    """Replace path with text atomically, keeping its mode."""
    directory = os.path.dirname(path)
    mode = os.stat(path).st_mode & 0o7777 if os.path.exists(path) else 0o644
    fd, tmp = tempfile.mkstemp(dir=directory, prefix='.subid-')
    with os.fdopen(fd, 'w') as handle:
        handle.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def overlaps(a_start, a_count, b_start, b_count):
    return a_start < b_start + b_count and b_start < a_start + a_count


def fix_host(path):
    """Keep one root: range in path; return the ones removed."""
    entries = parse(path)
    ranges = [e for e in entries if isinstance(e, tuple)]
    roots = [e for e in ranges if e[0] == 'root']
    if len(roots) <= 1:
        return []
    lxd = [(s, c) for name, s, c in ranges if name == '_lxd']
    keep = next((r for r in roots if (r[1], r[2]) in lxd), roots[0])
    removed = [r for r in roots if r is not keep]
    write(path, render([e for e in entries if e not in removed]))
    print('subid-ranges: %s: kept %s:%d:%d for LXD, removed %s (a second '
          'root: range breaks every container start)' % (
              path, keep[0], keep[1], keep[2],
              ', '.join('%s:%d:%d' % r for r in removed)))
    return removed


def incus_range(path, host_path, removed):
    """The root: range Incus gets: the one in path if still good."""
    host = [e for e in parse(host_path) if isinstance(e, tuple)]

    def free(start, count):
        return (start >= FIRST_ID and start + count - 1 <= LAST_ID
                and not any(overlaps(start, count, s, c)
                            for _n, s, c in host))

    current = [e for e in parse(path) if isinstance(e, tuple)
               and e[0] == 'root']
    if len(current) == 1 and free(current[0][1], current[0][2]):
        return current[0], False
    for entry in removed:
        if free(entry[1], entry[2]):
            return entry, True
    start = max([FIRST_ID] + [s + c for _n, s, c in host])
    count = min(INCUS_COUNT, LAST_ID + 1 - start)
    if count < 65536:
        sys.exit('subid-ranges: no room left for an Incus range after the '
                 'ranges in %s' % host_path)
    return ('root', start, count), True


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('incus_dir', nargs='?',
                        help='where to write subuid and subgid for Incus')
    parser.add_argument('--host-only', action='store_true')
    parser.add_argument('--etc', default='/etc', help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.host_only and not args.incus_dir:
        parser.error('give DIR or --host-only')
    for kind in ('subuid', 'subgid'):
        host_path = os.path.join(args.etc, kind)
        removed = fix_host(host_path)
        if args.host_only:
            continue
        os.makedirs(args.incus_dir, mode=0o755, exist_ok=True)
        path = os.path.join(args.incus_dir, kind)
        entry, changed = incus_range(path, host_path, removed)
        if changed:
            write(path, render([entry]))
            print('subid-ranges: %s: %s:%d:%d for Incus' % (path, *entry))


if __name__ == '__main__':
    main()
