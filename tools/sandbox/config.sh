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

write_neutron_conf() {
    mkdir -p "$ETC/neutron/plugins/ml2" "$DATA/neutron"
    cat >"$ETC/neutron/neutron.conf" <<CONF
[DEFAULT]
use_stderr = true
core_plugin = ml2
# auto_allocate (with router, which it needs) answers Nova's dry run for
# "networks=auto" (the CLI's default without --nic): with no default
# external network that is a clear HTTP 400, not a 500 from a 404.
service_plugins = router,auto_allocate
auth_strategy = keystone
transport_url = $(rabbit_url)
api_paste_config = $VENV/etc/neutron/api-paste.ini
state_path = $DATA/neutron
bind_host = 127.0.0.1
bind_port = $PORT_NEUTRON
api_workers = 1
rpc_workers = 0
notify_nova_on_port_status_changes = false
notify_nova_on_port_data_changes = false

[database]
connection = $(db_url neutron)

[oslo_concurrency]
lock_path = $DATA/neutron/lock

$(authtoken_section neutron)
CONF
    cat >"$ETC/neutron/plugins/ml2/ml2_conf.ini" <<CONF
[ml2]
type_drivers = flat
tenant_network_types =
mechanism_drivers =
extension_drivers =

[ml2_type_flat]
flat_networks = *
CONF
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
