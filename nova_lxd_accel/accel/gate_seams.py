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

"""What each part asks of the GPU gate: one typed seam per part.

The gate (:class:`nova_lxd_accel.accel.health.gate.GpuGate`) decides
whether a GPU may be handed out. Each part that calls it is given the
gate as one object typed by the seam below, never as loose callables:

* :class:`ClaimGate`: the one claim (:class:`.binding.claims.Claims`),
  which also asks whether each device it looks up may be bound;
* :class:`ProviderTreeGate`: the driver where it writes the provider tree
  (``LXDDriver.update_provider_tree``): the accelerator inventory
  (:class:`.inventory.reporter.AcceleratorInventory`) is given the probe's
  facts and the gated providers as arguments, and never the gate;
* :class:`ReleaseGate`: the instance's life
  (:class:`nova_lxd_accel.instance.lifecycle.Lifecycle`);
* :class:`GoneGate`: the host (:class:`nova_lxd_accel.host.Host`) and
  its lifecycle watcher.

They live in the accel root, which every room may read, so that the gate
(in ``health/``) names them as its bases: an editor goes from a call in
a part to the seam's method, and from there to the gate's.
"""

import typing


class ClaimGate(typing.Protocol):
    """What a claim reads and tells, under the claim lock."""

    def unavailable_units(self, records=None):
        """Unit key -> why no claim may pick it now.

        :param records: the daemon's instance records the claim listed.
        """

    def dirty_share_projects(self, records=None):
        """Shared GPU -> projects of its slots released, not yet clean."""

    def note_bound(self, container, instance, records):
        """A claim wrote the units ``records`` into ``container``."""

    def check_bindable(self, device, rp_uuid):
        """Raise :class:`.exception.GpuHeld` when ``device`` is held.

        Asked of each device the claim looks up (``rp_uuid``: the
        provider it was reported under).
        """


class ProviderTreeGate(typing.Protocol):
    """What the driver asks when it writes the provider tree.

    Under nova's lock: both are read from memory.
    """

    def probed_gpus(self):
        """PCI address -> the last probe's facts of each GPU."""

    def apply(self, desired):
        """Desired providers with held GPUs and dirty units reserved."""


class ReleaseGate(typing.Protocol):
    """What the driver tells when it removes a container."""

    def note_destroy(self, read_record):
        """Mark the units of a container about to be removed dirty.

        :returns: the keys marked, or None when the release could not be
            recorded.
        """

    def removal_failed(self, keys):
        """The removal after :meth:`note_destroy` failed."""

    def verify_release(self, keys):
        """Wait for the units ``keys`` to be verified clean.

        :returns: the keys still dirty.
        """


class GoneGate(typing.Protocol):
    """What the lifecycle watcher tells."""

    def note_gone(self, container):
        """``container`` was removed behind nova's back."""
