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

"""cASO's nova extractor with this cloud's accelerator counts and busy time.

Registered under cASO's ``caso.extractors`` entry point as
``nova_lxd_accel``; a site lists it in place of ``nova`` in cASO's
configuration (see ``doc/source/admin/gpu-operations.rst``)::

    [DEFAULT]
    extractor = nova_lxd_accel,cinder,neutron

    [nova_lxd_accel]
    usage_files = /var/spool/caso/gpu-usage/*.json

It is cASO's own :class:`caso.extract.openstack.nova.NovaExtractor` (same
cloud records, same accelerator records, month by month); only the
accelerator records change: ``Count`` is the flavor's
``accounting:accelerator_count`` (a fraction of a GPU for a MIG slice or a
shared slot) and ``ActiveDuration`` the busy time the compute hosts
measured (:mod:`nova_lxd_accel.accounting.apel`). Their class is a
subclass of cASO's record, so cASO's messengers send them as accelerator
records. Only cASO (not nova) needs to be installed where this runs.
"""

import calendar
import datetime

from caso.extract.openstack import nova as caso_nova
from caso import record as caso_record
from oslo_config import cfg
from oslo_log import log

from nova_lxd_accel.accounting import apel

CONF = cfg.CONF
CONF.register_opts(apel.caso_opts, group=apel.CASO_GROUP)

LOG = log.getLogger(__name__)


class AcceleratorRecord(caso_record.AcceleratorRecord):
    """cASO's accelerator record with APEL's fractional ``Count``.

    cASO 5.2.2 declares ``count: int``, which refuses ``0.142857``; the
    APEL accelerator record's ``Count`` is a number.
    """

    count: float


def _epoch(when):
    """UNIX time of a naive UTC datetime (cASO's records use those)."""
    return calendar.timegm(when.utctimetuple()) + when.microsecond / 1e6


class NovaExtractor(caso_nova.NovaExtractor):
    """cASO's nova extractor; accelerator records counted fairly."""

    def extract(self, extract_from, extract_to):
        # read the exports once per run (cASO makes one extractor per
        # project and run), so every record sees the same files
        self.gpu_usage = self._load_gpu_usage()
        return super().extract(extract_from, extract_to)

    @staticmethod
    def _load_gpu_usage():
        units, problems = apel.load_exports(
            CONF.nova_lxd_accel.usage_files)
        for problem in problems:
            LOG.warning('GPU usage export not used: %s', problem)
        return units

    def _flavor_count(self, server):
        extra = self.flavors[server.flavor['id']]['extra']
        value = extra.get(CONF.nova_lxd_accel.count_key)
        try:
            return apel.parse_count(value)
        except ValueError as exc:
            LOG.warning('Flavor %(flavor)s: property %(key)s: %(error)s; '
                        'counting Accelerator:Number instead',
                        {'flavor': server.flavor['id'], 'error': exc,
                         'key': CONF.nova_lxd_accel.count_key})
            return None

    def _build_acc_records(self, server, server_record, extract_from,
                           extract_to):
        records = super()._build_acc_records(server, server_record,
                                             extract_from, extract_to)
        if not records:
            return records
        count = self._flavor_count(server)
        units = getattr(self, 'gpu_usage', {}).get(server.id)
        return {record_id: self._fair(record, server_record, count, units)
                for record_id, record in records.items()}

    @staticmethod
    def _fair(record, server_record, count, units):
        """Our record for one of cASO's monthly accelerator records."""
        fields = record.model_dump(exclude={'active_duration'})
        units_held = fields['count']
        if count is not None:
            fields['count'] = float(count)
        fair = AcceleratorRecord(**fields)
        # cASO's record runs from the later of the month's start and the
        # server's creation, for available_duration seconds
        start = max(datetime.datetime(record.measurement_year,
                                      record.measurement_month, 1),
                    server_record.start_time)
        start_s = _epoch(start)
        active = apel.active_duration(
            units, start_s, start_s + record.available_duration, units_held,
            record.available_duration)
        if active is not None:
            fair.active_duration = active
        return fair
