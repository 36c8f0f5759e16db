#!/bin/bash
# Configuration files of the sandbox cloud; sourced by tools/sandbox.sh.
#
# Every writer regenerates its file from the variables set by sandbox.sh
# (ports, paths, passwords), so re-running "up" always leaves a coherent set.
# shellcheck disable=SC2154  # all variables come from sandbox.sh

db_url() {
    local db=$1
    printf 'mysql+pymysql://openstack:%s@127.0.0.1:%s/%s?charset=utf8' \
        "$DB_PASSWORD" "$PORT_MYSQL" "$db"
}

rabbit_url() {
    printf 'rabbit://openstack:%s@127.0.0.1:%s/' \
        "$RABBIT_PASSWORD" "$PORT_AMQP"
}

# [keystone_authtoken] for the service user $1, printed on stdout.
authtoken_section() {
    local user=$1
    cat <<CONF
[keystone_authtoken]
www_authenticate_uri = $KEYSTONE_URL/v3
auth_url = $KEYSTONE_URL/v3
auth_type = password
project_domain_name = Default
user_domain_name = Default
project_name = service
username = $user
password = $SERVICE_PASSWORD
region_name = $REGION
service_token_roles_required = true
CONF
}

# A keystoneauth password section named $1 for the service user $2.
service_auth_section() {
    local section=$1 user=$2
    cat <<CONF
[$section]
auth_type = password
auth_url = $KEYSTONE_URL/v3
project_domain_name = Default
user_domain_name = Default
project_name = service
username = $user
password = $SERVICE_PASSWORD
region_name = $REGION
valid_interfaces = public
CONF
}

write_rabbitmq_conf() {
    mkdir -p "$ETC/rabbitmq"
    cat >"$ETC/rabbitmq/rabbitmq.conf" <<CONF
listeners.tcp.default = 127.0.0.1:$PORT_AMQP
default_user = openstack
default_pass = $RABBIT_PASSWORD
loopback_users = none
log.console = true
log.console.level = info
log.file = false
CONF
    printf '[].\n' >"$ETC/rabbitmq/enabled_plugins"
}

write_keystone_conf() {
    mkdir -p "$ETC/keystone"
    cat >"$ETC/keystone/keystone.conf" <<CONF
[DEFAULT]
use_stderr = true

[database]
connection = $(db_url keystone)

[token]
provider = fernet

[fernet_tokens]
key_repository = $ETC/keystone/fernet-keys

[fernet_receipts]
key_repository = $ETC/keystone/fernet-keys

[credential]
key_repository = $ETC/keystone/credential-keys

[identity]
password_hash_rounds = 4

[cache]
enabled = true
backend = oslo_cache.dict
CONF
}

write_placement_conf() {
    mkdir -p "$ETC/placement"
    cat >"$ETC/placement/placement.conf" <<CONF
[DEFAULT]
use_stderr = true

[api]
auth_strategy = keystone

[placement_database]
connection = $(db_url placement)

$(authtoken_section placement)
CONF
}

write_glance_conf() {
    mkdir -p "$ETC/glance" "$DATA/glance/images" "$DATA/glance/staging" \
        "$DATA/glance/tasks"
    cat >"$ETC/glance/glance-api.conf" <<CONF
[DEFAULT]
use_stderr = true
enabled_backends = file:file
bind_host = 127.0.0.1
bind_port = $PORT_GLANCE
workers = 0
image_size_cap = 2147483648
worker_self_reference_url = $GLANCE_URL

[database]
connection = $(db_url glance)

[glance_store]
default_backend = file

[file]
filesystem_store_datadir = $DATA/glance/images

[os_glance_staging_store]
filesystem_store_datadir = $DATA/glance/staging

[os_glance_tasks_store]
filesystem_store_datadir = $DATA/glance/tasks

[paste_deploy]
flavor = keystone
config_file = $VENV/etc/glance/glance-api-paste.ini

[oslo_concurrency]
lock_path = $DATA/glance/lock

$(authtoken_section glance)
CONF
}

# Neutron with ML2/Open vSwitch and its agents (L2, DHCP, L3, metadata).
# Why ML2/OVS and not OVN: here OVS runs only with the userspace datapath
# (no openvswitch kernel module), where the agents' veth ports
# (ovs_use_veth) and the OVS firewall (conntrack of the userspace
# datapath) work as measured; OVN's metadata and gateway ports are OVS
# internal ports moved into namespaces, which the userspace datapath
# cannot serve there.
write_neutron_conf() {
    mkdir -p "$ETC/neutron/plugins/ml2" "$DATA/neutron"
    cat >"$ETC/neutron/neutron.conf" <<CONF
[DEFAULT]
use_stderr = true
core_plugin = ml2
# router: the L3 agent's routers and floating IPs; auto_allocate answers
# Nova's "networks=auto" (the CLI's default without --nic).
service_plugins = router,auto_allocate
auth_strategy = keystone
transport_url = $(rabbit_url)
api_paste_config = $VENV/etc/neutron/api-paste.ini
state_path = $DATA/neutron
bind_host = 127.0.0.1
bind_port = $PORT_NEUTRON
api_workers = 1
rpc_workers = 1
rpc_state_report_workers = 0
# nova waits for network-vif-plugged before it calls a server ACTIVE
notify_nova_on_port_status_changes = true
notify_nova_on_port_data_changes = true
dhcp_agents_per_network = 1
global_physnet_mtu = 1500

[agent]
# Everything runs as root already: no sudo, no rootwrap; the same prefix
# starts the privsep helpers from the venv.
root_helper = $(neutron_root_helper)

[database]
connection = $(db_url neutron)

[oslo_concurrency]
lock_path = $DATA/neutron/lock

$(authtoken_section neutron)

$(service_auth_section nova neutron)
CONF
    cat >"$ETC/neutron/plugins/ml2/ml2_conf.ini" <<CONF
[ml2]
type_drivers = flat,vxlan
tenant_network_types = vxlan
mechanism_drivers = openvswitch
extension_drivers = port_security

[ml2_type_flat]
flat_networks = public

[ml2_type_vxlan]
vni_ranges = 1:1000
CONF
    cat >"$ETC/neutron/openvswitch_agent.ini" <<CONF
[ovs]
datapath_type = netdev
integration_bridge = br-int
tunnel_bridge = br-tun
bridge_mappings = public:$BR_EX
local_ip = 127.0.0.1
ovsdb_connection = tcp:127.0.0.1:6640
of_listen_address = 127.0.0.1

[agent]
tunnel_types = vxlan
root_helper = $(neutron_root_helper)

[securitygroup]
firewall_driver = openvswitch
enable_security_group = true
CONF
    cat >"$ETC/neutron/dhcp_agent.ini" <<CONF
[DEFAULT]
interface_driver = openvswitch
# veth pairs, not OVS internal ports: the userspace datapath cannot serve
# an internal port moved into another network namespace.
ovs_use_veth = true
dhcp_driver = neutron.agent.linux.dhcp.Dnsmasq
# dnsmasq re-reads its hosts file on each new port: as root, since the
# sandbox's state directory is root-only (0700), not as "nobody".
dnsmasq_config_file = $ETC/neutron/dnsmasq.conf
# metadata through the router (L3 agent), or here on a network without one
enable_isolated_metadata = true

[ovs]
integration_bridge = br-int
ovsdb_connection = tcp:127.0.0.1:6640

[agent]
root_helper = $(neutron_root_helper)
CONF
    printf 'user=root\n' >"$ETC/neutron/dnsmasq.conf"
    cat >"$ETC/neutron/l3_agent.ini" <<CONF
[DEFAULT]
interface_driver = openvswitch
ovs_use_veth = true
agent_mode = legacy

[ovs]
integration_bridge = br-int
ovsdb_connection = tcp:127.0.0.1:6640

[agent]
root_helper = $(neutron_root_helper)
CONF
    cat >"$ETC/neutron/metadata_agent.ini" <<CONF
[DEFAULT]
nova_metadata_host = 127.0.0.1
nova_metadata_port = $PORT_METADATA
metadata_proxy_shared_secret = $METADATA_SECRET
metadata_proxy_socket = $DATA/neutron/metadata_proxy
metadata_workers = 0

[agent]
root_helper = $(neutron_root_helper)
CONF
}

neutron_root_helper() {
    printf 'env PATH=%s/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        "$VENV"
}

# With simulated hardware (up --hardware), nova-compute (only it) talks to
# the LXD proxy in front of the daemon and runs the recorded nvidia-smi.
simulate_hardware_for_compute() {
    local conf=$1
    hardware_active || return 0
    sed -i "s|^endpoint = $DAEMON_DIR/unix.socket\$|endpoint = $HW_SOCKET|" \
        "$conf"
    cat >>"$conf" <<SECTION

# SIMULATED hardware: recorded host $(cat "$HARDWARE/name") (up --hardware)
[lxd_accelerators]
nvidia_smi_path = $HARDWARE/nvidia-smi
SECTION
}

write_nova_conf() {
    mkdir -p "$ETC/nova" "$DATA/nova/instances" "$DATA/nova/lock"
    # nova.wsgi.osapi_compute reads api-paste.ini and nova.conf from
    # OS_NOVA_CONFIG_DIR, the paste file first.
    cp "$VENV/etc/nova/api-paste.ini" "$ETC/nova/api-paste.ini"
    cat >"$ETC/nova/nova.conf" <<CONF
[DEFAULT]
use_stderr = true
transport_url = $(rabbit_url)
my_ip = 127.0.0.1
state_path = $DATA/nova
instances_path = $DATA/nova/instances
compute_driver = $SANDBOX_COMPUTE_DRIVER
heal_instance_info_cache_interval = -1
# One host: resize (to the other CPU flavor) happens on it.
allow_resize_to_same_host = true
# Heartbeats every 5 s: "up" notices a restarted nova-compute sooner.
report_interval = 5
graceful_shutdown_timeout = 5

[wsgi]
api_paste_config = $ETC/nova/api-paste.ini

[api]
auth_strategy = keystone

[api_database]
connection = $(db_url nova_api)

[database]
connection = $(db_url nova)

[conductor]
workers = 1

[scheduler]
workers = 1
discover_hosts_in_cells_interval = 30

[oslo_concurrency]
lock_path = $DATA/nova/lock

[oslo_messaging_notifications]
driver = noop

[vnc]
enabled = false

[spice]
enabled = false

[serial_console]
enabled = false

[glance]
region_name = $REGION
valid_interfaces = public

[cinder]
os_region_name = $REGION

[service_user]
send_service_user_token = true
auth_type = password
auth_url = $KEYSTONE_URL/v3
project_domain_name = Default
user_domain_name = Default
project_name = service
username = nova
password = $SERVICE_PASSWORD

$(authtoken_section nova)

$(service_auth_section placement nova)

$(service_auth_section neutron nova)
service_metadata_proxy = true
metadata_proxy_shared_secret = $METADATA_SECRET
default_floating_pool = public

# os-vif's privileged helpers, started as root without sudo or rootwrap.
[vif_plug_ovs_privileged]
helper_command = $VENV/bin/privsep-helper --config-file $ETC/nova/nova-compute.conf

[vif_plug_linux_bridge_privileged]
helper_command = $VENV/bin/privsep-helper --config-file $ETC/nova/nova-compute.conf

[os_vif_ovs]
ovsdb_connection = tcp:127.0.0.1:6640

[lxd]
# Named, not discovered: LXD and Incus may both run on this host.
endpoint = $DAEMON_DIR/unix.socket
storage_pool = default
project = default
CONF
    # nova-compute must not see the databases (nova checks it).
    awk '/^\[/ { skip = ($0 == "[database]" || $0 == "[api_database]") }
        !skip' "$ETC/nova/nova.conf" >"$ETC/nova/nova-compute.conf"
    simulate_hardware_for_compute "$ETC/nova/nova-compute.conf"
}
