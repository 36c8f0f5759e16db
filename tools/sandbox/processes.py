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

"""The sandbox's processes: start, find, wait for, stop, show.

A service runs in its own session, from ``/``, its output appended to
``log/NAME.log``; ``run/NAME.pid`` holds its pid and the pid's start time
(so that a recycled pid is never taken for the service) and
``run/NAME.conf-sum`` a digest of the files it read at start (layout.py),
so that ``up`` restarts it when they change.

Usage: processes.py start NAME -- ARGV...   start NAME unless it runs
       processes.py pid NAME                its pid; exit 1 if it is down
       processes.py wait-ports NAME TIMEOUT until its ports accept
       processes.py wait-log NAME TEXT TIMEOUT  until TEXT is in its log
                                            after its last start
       processes.py stop TIMEOUT NAME...    TERM, KILL after TIMEOUT
       processes.py stop-helpers            TERM the agents' dnsmasq and
                                            haproxy processes
       processes.py restart-changed         stop the services whose files
                                            changed, and retired ones
       processes.py down                    stop everything, in order
       processes.py status BACKEND SOCKET   the table of tools/sandbox.sh
                                            status (credentials.py check
                                            adds the warnings about modes);
                                            exit 1 unless all run

Environment: SANDBOX_DIR, SANDBOX_PORT_BASE (layout.py). Any Python 3,
standard library only.
"""

import datetime
import glob
import os
import signal
import socket
import subprocess
import sys
import time

from . import hardware
from . import layout as layout_module
from . import memory
from . import services

#: the services "down" stops last, one at a time, in this order
INFRASTRUCTURE = ('rabbitmq', 'mariadb', 'epmd')

#: socket states that do not keep a server from binding (it sets
#: SO_REUSEADDR): a stopped server's closing connections
CLOSING_STATES = ('TIME-WAIT', 'FIN-WAIT-1', 'FIN-WAIT-2', 'LAST-ACK',
                  'CLOSING')

POLL_S = 0.25


def _utc():
    return datetime.datetime.now(datetime.timezone.utc).strftime(
        '%Y-%m-%dT%H:%M:%SZ')


def start_time(pid, proc='/proc'):
    """The start time of a process (clock ticks since boot), or None."""
    try:
        with open(os.path.join(proc, str(pid), 'stat')) as handle:
            stat = handle.read()
        # after "(comm) ": field 3 (state) first; starttime is field 22
        return stat.rsplit(') ', 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _pid_file(layout, name):
    return layout.path('run', name + '.pid')


def pid_of(layout, name, proc='/proc'):
    """The pid of a running service, or None."""
    try:
        with open(_pid_file(layout, name)) as handle:
            pid, started = handle.read().split()[:2]
    except (OSError, ValueError):
        return None
    if start_time(pid, proc) != started or not running(pid, proc):
        return None
    return int(pid)


def record(layout, name, pid):
    with open(_pid_file(layout, name), 'w') as handle:
        handle.write('%d %s\n' % (pid, start_time(pid)))


def conf_sum(layout, name):
    """A digest of the files a service reads at start ("-": none).

    A file that is absent (the simulated hardware's) counts as empty.
    """
    files = services.files(layout, name)
    return layout_module.digest_files(files) if files else '-'


def port_accepts(port, host='127.0.0.1'):
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def port_holders(port):
    """The sockets that hold local port ``port``, as ``ss`` shows them.

    Listening or connected, any address: a server cannot bind a port that
    an outgoing connection took. Empty when the port is free.
    """
    try:
        out = subprocess.run(
            ['ss', '-Htanp', 'state', 'all', '( sport = :%d )' % port],
            capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        out = ''
    held = [line for line in out.splitlines()
            if line.split() and line.split()[0] not in CLOSING_STATES]
    if not held and port_accepts(port):
        held = ['something accepts connections on 127.0.0.1:%d' % port]
    return held


def start(layout, name, argv, out=sys.stdout):
    """Start ``argv`` as the service ``name``, unless it already runs.

    :returns: True when it runs; False when one of its ports is taken.
    """
    pid = pid_of(layout, name)
    if pid:
        out.write('%s already runs (pid %d)\n' % (name, pid))
        return True
    for port in services.ports(layout, name):
        held = port_holders(port)
        if held:
            out.write('cannot start %s: port %d is taken by another socket '
                      '(set SANDBOX_PORT_BASE to move all ports):\n%s\n'
                      % (name, port, '\n'.join(held)))
            return False
    log_path = os.path.join(layout.logs, name + '.log')
    with open(log_path, 'ab') as log:
        log.write(('\n=== %s: starting %s\n' % (_utc(), name)).encode())
        log.flush()
        # From /: a daemon keeps its working directory, and a deleted one
        # breaks its children. Two malloc arenas, not 8 per core: the
        # services' thread pools otherwise each grow heaps of their own.
        child = subprocess.Popen(
            argv, cwd='/', stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True,
            close_fds=True, env=dict(os.environ, MALLOC_ARENA_MAX='2'))
    record(layout, name, child.pid)
    with open(layout.path('run', name + '.conf-sum'), 'w') as handle:
        handle.write(conf_sum(layout, name) + '\n')
    # Not waited for: it outlives this process (init reaps it).
    out.write('started %s (pid %d): %s\n' % (name, child.pid,
                                             ' '.join(argv)))
    return True


def running(pid, proc='/proc'):
    try:
        with open(os.path.join(proc, str(pid), 'stat')) as handle:
            # a zombie has ended: only its parent has yet to reap it
            return handle.read().rsplit(') ', 1)[1].split()[0] != 'Z'
    except (OSError, IndexError):
        return False


def wait_pids(pids, timeout, out=sys.stdout, clock=time.monotonic):
    """Wait for the pids to end; KILL those left after ``timeout`` s."""
    deadline = clock() + timeout
    left = [pid for pid in pids if running(pid)]
    while left and clock() < deadline:
        time.sleep(POLL_S)
        left = [pid for pid in left if running(pid)]
    for pid in left:
        out.write('pid %d did not stop in %ds: KILL\n' % (pid, timeout))
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


def terminate(layout, names, out=sys.stdout, why=None):
    """TERM the named services that run; their pids."""
    pids = []
    for name in names:
        pid = pid_of(layout, name)
        if pid is None:
            _remove(_pid_file(layout, name))
            continue
        out.write('stopping %s (pid %d)%s\n' % (name, pid,
                                                ': ' + why if why else ''))
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        pids.append(pid)
    return pids


def stop(layout, names, timeout=30, out=sys.stdout):
    wait_pids(terminate(layout, names, out), timeout, out)


def _remove(path):
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def restart_changed(layout, out=sys.stdout):
    """Stop the services whose files changed, and the retired ones.

    The files: those each read when it started. The steps after this one
    start them again.
    """
    pids = terminate(layout, services.RETIRED_SERVICES, out,
                     "another service's process runs it now")
    for name in services.RETIRED_SERVICES:
        _remove(_pid_file(layout, name))
        _remove(layout.path('run', name + '.conf-sum'))
    for service in services.SERVICES:
        if pid_of(layout, service.name) is None:
            continue
        want = conf_sum(layout, service.name)
        if want == '-':
            continue
        try:
            with open(layout.path('run', service.name + '.conf-sum')) as f:
                have = f.read().strip()
        except OSError:
            have = ''
        if have != want:
            pids += terminate(layout, [service.name], out,
                              'its configuration changed')
    wait_pids(pids, 30, out)


def network_helper_pids(layout):
    """The dnsmasq and haproxy processes Neutron's agents started.

    They outlive the agents; found by the pid files under Neutron's state
    path.
    """
    pids = []
    for path in sorted(
            glob.glob(layout.path('data', 'neutron', 'external', 'pids',
                                  '*.pid*')) +
            glob.glob(layout.path('data', 'neutron', 'dhcp', '*', 'pid'))):
        try:
            with open(path) as handle:
                pids.append(int(handle.read().split()[0]))
        except (OSError, ValueError, IndexError):
            continue
    return pids


def stop_network_helpers(layout):
    for pid in network_helper_pids(layout):
        try:
            os.kill(pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass


def down(layout, timeout=30, out=sys.stdout):
    """Stop everything ``up`` started.

    The OpenStack services at once, then the agents' helpers, then
    RabbitMQ, MariaDB and epmd in turn.

    :returns: the services still running (none, normally).
    """
    names = [service.name for service in reversed(services.SERVICES)
             if service.name not in INFRASTRUCTURE]
    stop(layout, names + list(services.RETIRED_SERVICES), timeout, out)
    stop_network_helpers(layout)
    for name in INFRASTRUCTURE:
        stop(layout, [name], timeout, out)
    alive = [service.name for service in services.SERVICES
             if pid_of(layout, service.name)]
    for service in services.SERVICES:
        if service.name not in alive:
            _remove(_pid_file(layout, service.name))
    return alive


def _wait(layout, name, ready, timeout, late, out):
    """Until ``ready()``; False, saying why, when it does not come.

    That is: ``name`` exited, or ``timeout`` seconds passed (``late``
    says so).
    """
    deadline = time.monotonic() + timeout
    while not ready():
        if pid_of(layout, name) is None:
            out.write('%s exited; see %s\n' % (
                name, os.path.join(layout.logs, name + '.log')))
            return False
        if time.monotonic() > deadline:
            out.write(late + '\n')
            return False
        time.sleep(POLL_S)
    return True


def wait_ports(layout, name, timeout, out=sys.stdout):
    """Until each port of ``name`` accepts connections."""
    return all(_wait(layout, name, lambda port=port: port_accepts(port),
                     timeout, '%s: port %d not open after %ds'
                     % (name, port, timeout), out)
               for port in services.ports(layout, name))


def log_since_start(layout, name):
    """The part of a service's log written since its last start."""
    try:
        with open(os.path.join(layout.logs, name + '.log'), 'rb') as handle:
            text = handle.read().decode('utf-8', 'replace')
    except OSError:
        return ''
    marker = text.rfind(': starting %s\n' % name)
    return text[marker:] if marker >= 0 else text


def wait_log(layout, name, text, timeout, out=sys.stdout):
    """Until ``text`` is in the log of ``name`` since its last start."""
    return _wait(layout, name,
                 lambda: text in log_since_start(layout, name), timeout,
                 "%s: no '%s' in its log after %ds" % (name, text, timeout),
                 out)


def _mib(kib):
    return '-' if kib is None else str(kib // 1024)


#: the services of ``up --hosts 2``'s second compute host
SECOND_HOST_SERVICES = ('neutron-ovs-agent-2', 'nova-compute-2')


def status(layout, backend, daemon_socket, out=sys.stdout):
    """The table of ``tools/sandbox.sh status``; True when all run."""
    out.write('daemon: %s at %s\n' % (backend, daemon_socket))
    if hardware.active(layout):
        out.write('hardware: SIMULATED, recorded host %s (%s); no real '
                  'device is attached\n'
                  % (hardware.host_name(layout),
                     hardware.summary(layout.hardware)))
    else:
        out.write("hardware: the host's own\n")
    pids = {service.name: pid_of(layout, service.name)
            for service in services.SERVICES}
    # the same pids as the state column (a recycled pid counts for none)
    rows, helpers, _lxd = memory.report(
        layout.dir, list(pids),
        pids={name: pid for name, pid in pids.items() if pid})
    usage = dict(rows)
    horizon_on = os.path.exists(os.path.join(layout.horizon_data,
                                             'enabled'))
    row = '%-22s %-8s %-8s %-11s %8s %8s  %s\n'
    out.write(row % ('SERVICE', 'STATE', 'PID', 'PORT', 'PSS_MiB',
                     'RSS_MiB', 'LOG'))
    expected = running_count = total_pss = total_rss = 0
    for service in services.SERVICES:
        pid = pids[service.name]
        optional_off = (service.name == 'hwproxy' and
                        not hardware.active(layout) or
                        service.name == 'horizon' and not horizon_on or
                        service.name in SECOND_HOST_SERVICES and
                        layout.hosts() < 2)
        if optional_off and pid is None:
            continue
        expected += 1
        running_count += pid is not None
        used = usage.get(service.name) if pid else None
        if used:
            total_pss += used.pss_kib
            total_rss += used.rss_kib
        out.write(row % (
            service.name, 'running' if pid else 'stopped',
            pid or '-',
            ','.join(str(port) for port in
                     services.ports(layout, service.name)) or '-',
            _mib(used.pss_kib if used else None),
            _mib(used.rss_kib if used else None),
            os.path.join(layout.logs, service.name + '.log')))
    total_pss += helpers.pss_kib
    total_rss += helpers.rss_kib
    out.write(row % ('helpers', '-', '-', '-', _mib(helpers.pss_kib),
                     _mib(helpers.rss_kib),
                     'privsep daemons, dnsmasq, haproxy'))
    out.write('%d/%d running; the cloud holds %s MiB (PSS of the services '
              'and their helpers; RSS summed: %s MiB; %s and the '
              'containers not counted); state in %s\n'
              % (running_count, expected, _mib(total_pss), _mib(total_rss),
                 backend, layout.dir))
    return running_count == expected


def main(argv):
    layout = layout_module.Layout.from_environ()
    action, args = (argv[1], argv[2:]) if len(argv) > 1 else ('', [])
    if action == 'start' and len(args) >= 3 and args[1] == '--':
        return 0 if start(layout, args[0], args[2:]) else 1
    if action == 'pid' and len(args) == 1:
        pid = pid_of(layout, args[0])
        if pid is None:
            return 1
        print(pid)
        return 0
    if action == 'wait-ports' and len(args) == 2:
        return 0 if wait_ports(layout, args[0], int(args[1])) else 1
    if action == 'wait-log' and len(args) == 3:
        return 0 if wait_log(layout, args[0], args[1], int(args[2])) else 1
    if action == 'stop' and len(args) >= 1:
        stop(layout, args[1:], int(args[0]))
        return 0
    if action == 'stop-helpers' and not args:
        stop_network_helpers(layout)
        return 0
    if action == 'restart-changed' and not args:
        restart_changed(layout)
        return 0
    if action == 'down' and not args:
        alive = down(layout)
        if alive:
            sys.stderr.write("sandbox: some services still run (%s); see "
                             "'status'\n" % ', '.join(alive))
            return 1
        print('sandbox down')
        return 0
    if action == 'status' and len(args) == 2:
        return 0 if status(layout, args[0], args[1]) else 1
    sys.stderr.write(__doc__.split('\n\n')[2] + '\n')
    return 2


if __name__ == '__main__':
    sys.exit(main(sys.argv))
