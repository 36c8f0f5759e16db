"""Run an OpenStack command with its services in this one process.

Usage: in_process.py CONSOLE_SCRIPT [ARGS...]
       in_process.py nova-conductor+scheduler [ARGS...]
       in_process.py neutron-dhcp+l3-agent [ARGS...]
       in_process.py neutron-openvswitch-agent [ARGS...]

oslo.service's threading backend (the default of Nova 34 and Neutron 29)
starts even a single worker in a forked child: ``nova-conductor``,
``nova-scheduler``, ``neutron-rpc-server`` and Neutron's DHCP and L3 agents
each cost a master process plus one worker, ~70-115 MiB of proportional
memory (PSS) for each master. The sandbox runs one worker of each, so it
runs the command's own ``main()`` unchanged and only replaces oslo.service's
launchers with one that starts the services in this process, as
``nova-compute`` runs (oslo.service's ``no_fork``). The RPC servers,
periodic tasks and database code are the real ones; only the fork is gone.

``nova-conductor+scheduler`` runs both Nova services from one process (as
Nova's own functional tests do): the steps of their ``main()``, with the
two services created side by side; one Python with Nova's imports less.
``neutron-dhcp+l3-agent`` does the same for Neutron's DHCP and L3 agents
(each still reports as its own agent), and with them their privsep
daemons, one per privsep context instead of one per context and agent.

``neutron-openvswitch-agent`` forks nothing, but its process outlives its
agent: the agent runs in a thread of os-ken's AppManager, whose
``run_apps()`` then joins every os-ken thread, and with the threading hub
(Neutron 29) os-ken cannot kill its OpenFlow listener, blocked in
``accept()``. The agent left its loop on SIGTERM within 2 s, and its process
waited until ``down`` KILLed it 30 s later. Here the process ends when the
agent's thread does.

SIGTERM and SIGINT stop the services and end the process, as oslo.service's
``no_fork`` launcher does: the process exits once the services' stop()
returned (at most STOP_TIMEOUT seconds), without waiting for threads that
an agent leaves behind.
"""

import importlib
import importlib.metadata
import logging
import os
import signal
import sys
import threading

LOG = logging.getLogger('in_process')
STOP_TIMEOUT = 20


class InProcessLauncher:
    """oslo.service's launcher interface, without forking."""

    def __init__(self, conf=None, *args, **kwargs):
        self.conf = conf
        self.services = []
        self._stop_requested = threading.Event()

    def launch_service(self, service, workers=1):
        if workers not in (None, 1):
            LOG.warning('%s asked for %s workers; the sandbox runs one, '
                        'in this process', type(service).__name__, workers)
        service.start()
        self.services.append(service)

    def _request_stop(self, signum, frame):
        self._stop_requested.set()

    def wait(self):
        signal.signal(signal.SIGTERM, self._request_stop)
        signal.signal(signal.SIGINT, self._request_stop)
        # A timed wait, so that the main thread runs the signal handler.
        while not self._stop_requested.wait(1):
            pass
        watchdog = threading.Timer(STOP_TIMEOUT, os._exit, args=(1,))
        watchdog.daemon = True
        watchdog.start()
        self.stop()
        logging.shutdown()
        os._exit(0)

    def stop(self):
        for service in reversed(self.services):
            try:
                service.stop()
            except Exception:  # one failed stop must not keep the others
                LOG.exception('stopping %s failed', service)
        self.services = []

    def restart(self):
        for service in self.services:
            service.reset()


def launch(conf, service, workers=1, restart_method='reload', no_fork=False,
           start_method=None):
    launcher = InProcessLauncher(conf)
    launcher.launch_service(service, workers)
    return launcher


def patch_oslo_service():
    from oslo_service import service as oslo_service

    oslo_service.launch = launch
    oslo_service.ServiceLauncher = InProcessLauncher
    oslo_service.ProcessLauncher = InProcessLauncher


def console_script(name):
    found = importlib.metadata.entry_points(group='console_scripts',
                                            name=name)
    for entry_point in found:
        return entry_point.load()
    sys.exit('in_process.py: no console script named %r in %s'
             % (name, sys.prefix))


def nova_conductor_and_scheduler():
    """nova-conductor's and nova-scheduler's main(), as one."""
    from nova.conductor import rpcapi as conductor_rpcapi
    import nova.conf
    from nova import config
    from nova import objects
    from nova.scheduler import rpcapi as scheduler_rpcapi
    from nova import service
    from nova import version
    from oslo_log import log as oslo_logging
    from oslo_reports import guru_meditation_report as gmr
    from oslo_reports import opts as gmr_opts

    conf = nova.conf.CONF
    config.parse_args(sys.argv)
    oslo_logging.setup(conf, 'nova')
    objects.register_all()
    gmr_opts.set_defaults(conf)
    objects.Service.enable_min_version_cache()
    gmr.TextGuruMeditation.setup_autorun(version, conf=conf)
    launcher = InProcessLauncher(conf)
    launcher.launch_service(service.Service.create(
        binary='nova-conductor', topic=conductor_rpcapi.RPC_TOPIC))
    launcher.launch_service(service.Service.create(
        binary='nova-scheduler', topic=scheduler_rpcapi.RPC_TOPIC))
    return launcher.wait()


def neutron_dhcp_and_l3_agents():
    """neutron-dhcp-agent's and neutron-l3-agent's main(), as one."""
    from neutron.agent import dhcp_agent
    from neutron.agent import l3_agent
    from neutron.common import config as common_config
    from neutron.conf.agent import common as agent_config
    from neutron import service as neutron_service
    from neutron_lib.agent import topics
    from neutron_lib import constants
    from oslo_config import cfg

    conf = cfg.CONF
    dhcp_agent.register_options(conf)
    l3_agent.register_opts(conf)
    common_config.init(sys.argv[1:])
    agent_config.setup_logging()
    common_config.setup_gmr()
    agent_config.setup_privsep()
    launcher = InProcessLauncher(conf)
    launcher.launch_service(neutron_service.Service.create(
        binary=constants.AGENT_PROCESS_DHCP, topic=topics.DHCP_AGENT,
        report_interval=conf.AGENT.report_interval,
        manager='neutron.agent.dhcp.agent.DhcpAgentWithStateReport'))
    launcher.launch_service(neutron_service.Service.create(
        binary=constants.AGENT_PROCESS_L3, topic=topics.L3_AGENT,
        report_interval=conf.AGENT.report_interval,
        manager='neutron.agent.l3.agent.L3NATAgentWithStateReport'))
    return launcher.wait()


#: name: (the module a console script would import first, main).
#: nova.cmd.conductor picks Nova's concurrency backend on import, which
#: must come before anything imports oslo.service (and eventlet with it).
def neutron_openvswitch_agent():
    """neutron-openvswitch-agent's main(): the process ends with its agent."""
    from neutron.cmd.agents import ovs_neutron_agent
    from neutron.plugins.ml2.drivers.openvswitch.agent.openflow.native \
        import ovs_oskenapp

    agent_main = ovs_oskenapp.agent_main_wrapper

    def agent_then_exit(*args, **kwargs):
        status = 1  # the agent died of an exception (logged by it)
        try:
            agent_main(*args, **kwargs)
            status = 0
        finally:
            logging.shutdown()
            os._exit(status)

    # OVSNeutronAgentOSKenApp.start() looks the name up when it starts the
    # agent's thread.
    ovs_oskenapp.agent_main_wrapper = agent_then_exit
    return ovs_neutron_agent.main()


COMBINED = {
    'nova-conductor+scheduler': ('nova.cmd.conductor',
                                 nova_conductor_and_scheduler),
    'neutron-dhcp+l3-agent': ('neutron.cmd.agents.dhcp',
                              neutron_dhcp_and_l3_agents),
    'neutron-openvswitch-agent': ('neutron.cmd.agents.ovs_neutron_agent',
                                  neutron_openvswitch_agent),
}


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__.splitlines()[2])
    name = sys.argv[1]
    if name in COMBINED:
        first_module, command_main = COMBINED[name]
        importlib.import_module(first_module)
    else:
        command_main = console_script(name)
    patch_oslo_service()
    # The command parses sys.argv itself and names itself after argv[0].
    sys.argv = [name] + sys.argv[2:]
    return command_main()


if __name__ == '__main__':
    sys.exit(main())
