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

"""The holds: a GPU held for its health, from what a probe says of it.

A hold keeps a whole GPU from being handed out (the gate, :mod:`.gate`,
reserves it); an operator's hold (``nova-lxd-accel gpu hold``) is written
by the command line, the health holds here. Functions over the ledger
(the state file, :mod:`.gate_state`) and a probe's
:class:`.probe.Snapshot`, run by :class:`.gate.GpuGate` under the
state file's lock:

* :func:`health`: a GPU the probe finds unhealthy (uncorrectable ECC,
  pending page retirement or row remapping, fallen off the bus, a new
  fatal Xid) is held (kind ``unhealthy``; ``gone`` too when nvidia-smi no
  longer lists it) until an operator releases it;
* :func:`probed` / :func:`probe_health`: the NVIDIA GPUs are held as
  ``unprobeable`` after ``probe_failures_before_hold`` probes in a row that
  did not read everything (a failing, hung or unreadable nvidia-smi; for
  the GPUs in MIG mode, a failing ``nvidia-smi -q`` too), and offered
  again at the first complete probe;
* :func:`report_idle` and :func:`write_metrics`: the idle report and the
  Prometheus text file.
"""

import time

from oslo_log import log as logging

from nova_lxd_accel.accel.health import gate_state
from nova_lxd_accel.accel.health import metrics
from nova_lxd_accel.accel.health import probe
from nova_lxd_accel.accel.health import release

LOG = logging.getLogger(__name__)


def complete(snapshot):
    """Whether a probe read everything, the MIG devices' facts included."""
    return snapshot.available and not getattr(snapshot, 'mig_error', None)


def cut_short(snapshot):
    """Whether the probe's caller's deadline, not nvidia-smi, ended it.

    A delete or a re-check gives its probe what is left of its own wait;
    a slow nvidia-smi (answering within ``nvidia_smi_timeout``) is then
    cut. Such a probe is no verdict on nvidia-smi: counted as a failure,
    deletes in a row would hold the GPUs and the next periodic probe free
    them again, and Placement's inventory would flap. A probe cut short
    is never :func:`complete`.
    """
    return any((why or '').startswith(probe.DEADLINE_REACHED) for why in (
        snapshot.error, getattr(snapshot, 'mig_error', None)))


def probed(state, snapshot, known, now, conf):
    """Record a probe in ``state``; hold or free by its outcome.

    A probe :func:`cut_short` neither counts toward the unprobeable hold
    nor lifts one: the periodic probe, which has no deadline, decides.
    """
    if cut_short(snapshot):
        failures = (state.get('probe') or {}).get('failures') or 0
    else:
        failures = probe_health(state, snapshot, known, now, conf)
    state['probe'] = {'at': now, 'available': snapshot.available,
                      'complete': complete(snapshot),
                      'error': snapshot.error or getattr(
                          snapshot, 'mig_error', None),
                      'failures': failures}


def probe_health(state, snapshot, known, now, conf):
    """Hold or free the NVIDIA GPUs by whether the probe answers.

    A probe that reads the GPUs but not ``nvidia-smi -q`` (the MIG
    devices' facts) counts as failed for the GPUs in MIG mode.

    :returns: how many probes in a row have failed, this one included.
    """
    group = conf.lxd_accelerators
    whole = complete(snapshot)
    failures = 0 if whole else (
        (state.get('probe') or {}).get('failures') or 0) + 1
    if whole or not release.verifying(conf):
        for pci, hold in list(state['holds'].items()):
            if hold.get('kind') != gate_state.KIND_UNPROBEABLE:
                continue
            del state['holds'][pci]
            why = ('the GPU probe answers again' if whole
                   else 'verified release is turned off')
            gate_state.add_event(state, 'release', pci, why, now,
                                 by=gate_state.BY_COMPUTE)
            LOG.info('GPU %(pci)s is offered again: %(why)s',
                     {'pci': pci, 'why': why})
        return failures
    nvidia = sorted(pci for pci, gpu in known.items() if gpu.is_nvidia)
    error = snapshot.error
    if snapshot.available:
        # only -q failed: the GPUs in MIG mode cannot be verified
        error = snapshot.mig_error
        nvidia = [pci for pci in nvidia if pci in snapshot.gpus and (
            snapshot.gpus[pci].mig_mode or '').lower() == 'enabled']
    if not nvidia:
        return failures
    missing = error == probe.NO_NVIDIA_SMI
    if not missing and failures < group.probe_failures_before_hold:
        LOG.warning('The GPU probe failed (%(error)s), %(n)d time(s) in '
                    'a row; the NVIDIA GPUs are held after %(max)d',
                    {'error': error, 'n': failures,
                     'max': group.probe_failures_before_hold})
        return failures
    if missing:
        reason = ('%s does not exist: a unit bound here could never be '
                  'verified clean at release' % group.nvidia_smi_path)
    else:
        reason = ('the GPU probe failed %d times in a row (last: %s): a '
                  'unit bound here could never be verified clean at '
                  'release' % (failures, error))
    for pci in nvidia:
        hold = state['holds'].get(pci)
        if hold is not None and \
                hold.get('kind') != gate_state.KIND_UNPROBEABLE:
            continue        # an operator's or unhealthy hold stays
        if gate_state.hold_by_compute(state, pci,
                                      gate_state.KIND_UNPROBEABLE, reason,
                                      now):
            LOG.error('GPU %(pci)s is not offered: %(reason)s. Make '
                      'nvidia-smi answer on this host; the GPU is '
                      'offered again at the first probe that answers',
                      {'pci': pci, 'reason': reason})
    return failures


def new_fatal_xids(state, snapshot, pci, conf):
    """Fatal Xid messages of one GPU not acted on before.

    ``state['xid']`` remembers, per GPU and boot, the time of the last
    message acted on, so a released GPU is not held again by the same
    message; one older than ``xid_max_age`` when first read is ignored.
    """
    group = conf.lxd_accelerators
    fatal = set(group.fatal_xids or ())
    events = snapshot.xids_on(pci)
    if not fatal or not events:
        return []
    record = state.setdefault('xid', {})
    if record.get('boot_id') != snapshot.boot_id:
        record.clear()
        record.update(boot_id=snapshot.boot_id, handled={})
    handled = record.setdefault('handled', {}).get(pci)
    fresh = []
    for event in events:
        if event.code not in fatal or \
                (handled is not None and event.at <= handled):
            continue
        if group.xid_max_age and snapshot.uptime is not None and \
                snapshot.uptime - event.at > group.xid_max_age:
            continue
        fresh.append(event)
    if fresh:
        record['handled'][pci] = max(e.at for e in fresh)
    return fresh


def xid_text(event, snapshot):
    when = ''
    if snapshot.uptime is not None:
        wall = snapshot.taken_at - (snapshot.uptime - event.at)
        when = ' at %s' % time.strftime('%Y-%m-%dT%H:%M:%SZ',
                                        time.gmtime(wall))
    return 'Xid %d%s: %s' % (event.code, when,
                             event.message or 'no message')


def health(state, current, snapshot, known, now, conf, warned):
    for pci, gpu in known.items():
        problems = snapshot.problems(pci, expected_nvidia=gpu.is_nvidia)
        problems = list(problems) + [
            xid_text(e, snapshot)
            for e in new_fatal_xids(state, snapshot, pci, conf)]
        if not problems:
            continue
        reason = '; '.join(problems)
        gone = snapshot.available and pci not in snapshot.gpus and \
            gpu.is_nvidia
        if pci not in state['holds'] or (
                gone and not state['holds'][pci].get('gone') and
                state['holds'][pci].get('kind') !=
                gate_state.KIND_OPERATOR):
            gate_state.hold_by_compute(state, pci,
                                       gate_state.KIND_UNHEALTHY, reason,
                                       now, gone=gone)
            LOG.error('GPU %(pci)s is unhealthy (%(reason)s): reserved '
                      'and never bound until an operator runs '
                      '"nova-lxd-accel gpu release %(pci)s"',
                      {'pci': pci, 'reason': reason})
        users = sorted({u['instance'] for u in current.values()
                        if u['pci'] == pci})
        if users and warned.get(pci) != (reason, users):
            warned[pci] = (reason, users)
            LOG.warning('Instances %(users)s use unhealthy GPU %(pci)s '
                        '(%(reason)s); they are left running',
                        {'users': ', '.join(users), 'pci': pci,
                         'reason': reason})


def report_idle(state, now, conf, warned):
    for unit in gate_state.idle_units(state, conf, now):
        key = (unit['unit'], unit['idle_since'])
        if warned.get(unit['unit']) == key:
            continue
        warned[unit['unit']] = key
        LOG.warning('GPU %(pci)s (%(unit)s) of instance %(instance)s, '
                    'project %(project)s, has shown no compute use '
                    'since %(since)s',
                    {'pci': unit['pci'], 'unit': unit['unit'],
                     'instance': unit['instance'],
                     'project': unit['project'],
                     'since': time.strftime(
                         '%Y-%m-%dT%H:%M:%SZ',
                         time.gmtime(unit['idle_since']))})


def write_metrics(state, known, now, conf):
    path = conf.lxd_accelerators.metrics_file
    if not path:
        return
    try:
        metrics.write_textfile(
            path, metrics.render(state, sorted(known),
                                 conf, now))
    except OSError as exc:
        LOG.warning('Cannot write the GPU metrics file %(path)s: '
                    '%(error)s', {'path': path, 'error': exc})
