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

"""Exceptions of nova-lxd-accel.

Each class carries a ``msg_fmt`` filled from keyword arguments, so every
message of a kind reads the same and names what went wrong and what to do.
The driver-facing ones derive from nova's exceptions where nova gives a
failure a meaning (for instance ``ImageUnacceptable`` or
``InstanceNotFound``), so the compute manager reacts to them correctly.
"""

from nova import exception as nova_exception


class LXDAccelException(nova_exception.NovaException):
    """Base of the project's own errors."""

    msg_fmt = 'An unknown nova-lxd-accel error occurred.'


class LXDUnreachable(LXDAccelException):
    msg_fmt = ('Cannot reach the LXD daemon at %(endpoint)s: %(reason)s. '
               'Check that LXD runs (`lxc info`) and that [lxd] endpoint '
               'in nova.conf points at it.')


class LXDNotReady(LXDAccelException):
    msg_fmt = ('LXD at %(endpoint)s is not usable by nova-lxd-accel: '
               '%(reason)s')


class LXDOperationFailed(LXDAccelException):
    msg_fmt = 'LXD refused to %(action)s %(target)s: %(reason)s'


class LXDOperationTimeout(LXDAccelException):
    msg_fmt = ('LXD did not finish %(action)s %(target)s within '
               '%(timeout)s seconds; raise [lxd] timeout if the host is busy.')


class ContainerNotFound(nova_exception.InstanceNotFound):
    msg_fmt = ('Instance %(instance_id)s has no LXD container '
               '%(container)s.')


class ContainerGone(LXDAccelException):
    msg_fmt = ('The LXD container %(container)s of instance %(instance_id)s '
               'was deleted on the daemon, outside of Nova; what was in it '
               'is lost. Rebuild the server from an image (openstack server '
               'rebuild) or delete it.')


class FlavorNotAllowed(LXDAccelException):
    msg_fmt = ('Flavor %(flavor)s asks for %(feature)s, which this compute '
               'host does not allow: %(how)s')


class MpsNeedsSharedIdmap(FlavorNotAllowed):
    """An MPS quota share in a container with a user-id range of its own."""

    msg_fmt = ('Flavor %(flavor)s asks for a share of a GPU with MPS quotas '
               '(lxd:gpu_memory_mb) in a container with a host user-id '
               'range of its own (security.idmap.isolated, from %(why)s): '
               'an MPS server serves one host user at a time, so its '
               'clients in other containers would wait, without an error, '
               'until it exits. Set lxd:isolated_idmap=false on the flavor '
               '(`openstack flavor set --property lxd:isolated_idmap=false '
               '%(flavor)s`).')


class RescueFailed(LXDAccelException):
    msg_fmt = 'Cannot rescue instance %(instance_id)s: %(reason)s'


class LXDObjectNotFound(LXDOperationFailed):
    msg_fmt = 'LXD has no %(target)s (while trying to %(action)s): %(reason)s'


class LXDOperationGone(LXDObjectNotFound):
    msg_fmt = ('LXD forgot its operation to %(action)s %(target)s before '
               'its result was read (it keeps a finished operation 5 '
               'seconds; the host may be overloaded): the outcome is '
               'unknown')


class AcceleratorUnavailable(LXDAccelException):
    msg_fmt = ('Cannot bind %(count)s %(resource_class)s of resource '
               'provider %(provider)s (%(device)s): only %(free)s free; '
               'held: %(held)s. Placement and the LXD containers of this '
               'host disagree; nova-compute logs the details (who holds '
               'each unit) at startup and here.')


class SharedGpuOtherProject(AcceleratorUnavailable):
    msg_fmt = ('Shared GPU %(pci)s (resource provider %(provider)s) serves '
               'instances of another project: by default a shared GPU '
               'serves one project at a time, so nova reschedules this '
               'instance to another host ([lxd_accelerators] '
               'shared_gpu_any_project lets projects share a GPU; '
               'nova-compute logs which projects)')


class SharedGpuMpsOtherProject(SharedGpuOtherProject):
    msg_fmt = ('Shared GPU %(pci)s (resource provider %(provider)s) serves '
               'instances of another project, and this flavor has a GPU '
               'memory or compute quota: quota instances share the MPS '
               'daemon\'s /dev/shm and pipe directory read-write, so they '
               'never share a GPU across projects, even with '
               '[lxd_accelerators] shared_gpu_any_project. Nova reschedules '
               'this instance to another host; a flavor without a quota '
               '(time-sliced) can share across projects where that option '
               'allows it.')


class InfinibandCardOtherProject(AcceleratorUnavailable):
    msg_fmt = ('The InfiniBand virtual functions of card %(pci)s (resource '
               'provider %(provider)s) serve instances of another project: '
               'a card\'s virtual functions serve one project at a time '
               '(their GUIDs, and so their partitions, are fixed per card), '
               'so nova reschedules this instance to another host '
               '([lxd_accelerators] infiniband_vf_any_project lets projects '
               'share a card; nova-compute logs which projects)')


class SharedGpuModeMismatch(AcceleratorUnavailable):
    msg_fmt = ('Flavor %(flavor)s %(quota)s, so it needs a GPU shared in '
               '%(flavor_mode)s mode, but GPU %(pci)s is shared in '
               '%(card_mode)s mode: the flavor must require '
               '%(trait)s=required (`openstack flavor set --property`; '
               '`nova-lxd-accel flavors` writes it). Nova reschedules the '
               'instance (resource provider %(provider)s).')


class AcceleratorNotBindable(LXDAccelException):
    msg_fmt = ('Cannot bind %(resource_class)s of resource provider '
               '%(provider)s into an LXD container: %(reason)s')


class VIFNotSupported(LXDAccelException,
                      nova_exception.VirtualInterfacePlugException):
    msg_fmt = ('Port %(port_id)s has VIF type %(vif_type)s and vnic_type '
               '%(vnic_type)s; nova-lxd-accel plugs only vnic_type normal '
               'ports of VIF types %(supported)s into containers.')


class VIFPlugFailed(LXDAccelException,
                    nova_exception.VirtualInterfacePlugException):
    msg_fmt = ('os-vif could not %(action)s port %(port_id)s: %(reason)s. '
               'Check that Open vSwitch runs and that [os_vif_ovs] '
               'ovsdb_connection points at it.')


class MigrationFailed(LXDAccelException):
    msg_fmt = ('Cannot move the container of instance %(instance_id)s to '
               'host %(dest)s: %(reason)s')


class ResizeBackupMissing(LXDAccelException):
    msg_fmt = ('Cannot revert the resize or migration of instance '
               '%(instance_id)s: its kept container %(container)s is gone '
               'from this host (was the migration already confirmed?)')


class BootFromVolumeNotSupported(nova_exception.BuildAbortException,
                                 nova_exception.InvalidBDMFormat):
    """Raised by spawn: the build is aborted, not rescheduled.

    An InvalidBDMFormat too, for callers that look for a bad mapping.
    """

    msg_fmt = ('Build of instance %(instance_uuid)s aborted: nova-lxd-accel '
               'cannot boot a container from a volume; boot from an LXD '
               'image in Glance instead (volumes can be attached as extra '
               'block devices)')


class LXDConcurrentUpdate(LXDAccelException):
    msg_fmt = ('Cannot %(action)s %(target)s: it changed under us '
               '%(attempts)s times in a row (LXD answered 412 to every '
               'If-Match); try again')


class LXDPreconditionFailed(LXDOperationFailed):
    """LXD answered 412: the ETag sent with If-Match is stale."""


class FlavorExtraSpecInvalid(LXDAccelException, nova_exception.Invalid):
    """A bad lxd: extra spec: every host refuses it (the build aborts)."""

    msg_fmt = ('Flavor %(flavor)s has extra spec %(key)s=%(value)s, which '
               'nova-lxd-accel refuses: %(reason)s. Fix the flavor '
               '(`openstack flavor set` / `unset --property %(key)s`); '
               'compute API microversion 2.86 or later checks it when set.')


class FlavorExtraSpecsInconsistent(FlavorExtraSpecInvalid):
    """Extra specs that are valid one by one but not together.

    The compute API checks each extra spec alone, so only spawn refuses
    these (the build aborts, the fault says what to change).
    """

    msg_fmt = ('Flavor %(flavor)s: %(reason)s (`openstack flavor set '
               '--property`). The compute API checks each extra spec alone, '
               'so this is refused when an instance boots.')


class DaemonAmbiguous(LXDAccelException):
    msg_fmt = ('More than one container daemon answers on this host '
               '(%(daemons)s) and [lxd] endpoint does not say which one '
               'nova-compute uses: set [lxd] endpoint in nova.conf to '
               '%(endpoints)s.')


class DaemonNotUsable(LXDNotReady):
    msg_fmt = ('%(daemon)s at %(endpoint)s cannot serve nova-lxd-accel: '
               '%(reason)s')


class ImageToolMissing(LXDAccelException):
    msg_fmt = ('Cannot read Glance image %(image_id)s: it is compressed '
               'with %(compression)s and this compute host has no '
               '`%(tool)s` command; install it (Debian/Ubuntu: apt-get '
               'install %(package)s)')


class GpuHeld(LXDAccelException):
    msg_fmt = ('GPU %(pci)s (resource provider %(provider)s) is held '
               '(%(kind)s: %(reason)s) and is not bound; an operator '
               'returns it with "nova-lxd-accel gpu release %(pci)s '
               '--reason ..."')


class DaemonUnreachable(LXDUnreachable):
    """LXDUnreachable that names the daemon and its own check command."""

    msg_fmt = ('Cannot reach the %(daemon)s daemon at %(endpoint)s: '
               '%(reason)s. Check that it runs (`%(check)s`) and that [lxd] '
               'endpoint in nova.conf points at it.')


class InstanceFileTooLarge(LXDAccelException):
    msg_fmt = ('%(path)s in instance %(name)s is larger than %(limit)s '
               'bytes, more than nova-compute reads of a file the image '
               'or the tenant wrote: %(why)s')


class SpawnInterrupted(LXDAccelException):
    msg_fmt = ('nova-compute on %(host)s stopped (killed or restarted) '
               'while it was building this instance; at its restart it '
               '%(cleanup)s. Delete the server and create it again.')


class EventsUnsupported(LXDAccelException):
    msg_fmt = ('The daemon at %(endpoint)s has no events API (%(reason)s); '
               'container states are polled instead.')


class EventStreamLost(LXDUnreachable):
    msg_fmt = ('The event stream of the daemon at %(endpoint)s ended: '
               '%(reason)s')


class EphemeralDiskRefused(LXDAccelException):
    msg_fmt = ('Instance %(instance_id)s: the ephemeral disk it asks for '
               'cannot be given: %(reason)s')
