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

"""What the accelerator layer reads from nova and Placement.

Each look-up runs in nova-compute, with nova's admin context: the
instances nova has on a host (through the conductor) and allocations read
with nova's Placement report client. nova is imported when a look-up
runs, so the command line and the pure modules never import it. Callers
take these functions as defaults of their seams (tests pass their own).
"""


def _admin_context():
    from nova import context as nova_context

    return nova_context.get_admin_context()


def host_instances(host):
    """nova's instances on ``host``, without their extra fields."""
    from nova import objects

    return objects.InstanceList.get_by_host(_admin_context(), host,
                                            expected_attrs=[])


def _report_client():
    from nova.scheduler.client import report

    return report.report_client_singleton()


def nova_instance_projects(host):
    """{instance uuid: project id} of the instances nova has on ``host``."""
    return {i.uuid: i.project_id for i in host_instances(host)}


def placement_allocations(instance_uuid):
    """Placement allocations of one consumer, through nova's client."""
    return _report_client().get_allocs_for_consumer(
        _admin_context(), instance_uuid)['allocations']


def provider_allocations(rp_uuid):
    """Allocations against one provider, read from Placement."""
    return _report_client().get_allocations_for_resource_provider(
        _admin_context(), rp_uuid).allocations


def record_fault(instance, exc):
    """Record ``exc`` as a fault of ``instance`` (shown by ``server show``)."""
    from nova.compute import utils as compute_utils

    compute_utils.add_instance_fault_from_exc(_admin_context(), instance, exc)


def update_resources(virtapi, host):
    """Run nova's resource update now, as its periodic task would.

    A GPU unit released dirty turned clean after its delete ended
    (:mod:`.accel.health.gate`'s re-check): Placement offers it at once.
    nova's VirtAPI gives drivers no public way to ask for that update, so
    this is the one place that reaches into the compute manager's tracker.
    """
    tracker = getattr(getattr(virtapi, '_compute', None), 'rt', None)
    if tracker is not None:
        tracker.update_available_resource(_admin_context(), host)
