#!/bin/bash
# Tempest, OpenStack's conformance suite, against a running sandbox.
#
#   tools/sandbox.sh up
#   tools/sandbox.sh image debian
#   tools/sandbox-tempest.sh [--subset ci|compute] [--concurrency N]
#                            [--no-validation]
#
# Installs tempest 47.0.0 and python-tempestconf 3.5.4 in their own venv
# under the sandbox's state directory (pinned with the project's
# constraints.txt), writes tempest.conf offline with
# discover-tempest-config (the sandbox's own image and flavors, never a
# download; the features the driver does not have are turned off below,
# each with its reason), runs the subset and prints the pass / fail / skip
# totals. The subunit stream, a text report and the totals (JSON) are
# written to $SANDBOX_DIR/tempest/results/<subset>.*.
#
#   --subset ci       compute and image API tests tagged "smoke" (a few
#                     minutes; what CI runs)
#   --subset compute  all of tempest.api.compute, plus the image and network
#                     API smoke tests (about ten minutes at concurrency 2)
#   --subset multinode  cold migration and the multi-node scheduling tests
#                     (tools/sandbox.sh up --hosts 2)
#   --regex R         only the tests R matches, as subset "adhoc" (its
#                     results are not put on the conformance page)
#
# Environment: SANDBOX_DIR (default /var/tmp/nova-lxd-accel-sandbox),
# TEMPEST_CONSTRAINTS (default <repo>/constraints.txt), SANDBOX_UV (uv's
# path: uv makes the venv instead of venv and pip).
#
# Validation is on: tempest boots the sandbox's Debian 12 cloud-init image
# (tools/sandbox.sh image debian), gives each server a key pair, a
# security group and a floating IP, and checks the guest over SSH (its
# hostname, vCPUs, interfaces, reboots). Tempest runs on this host, so the
# script puts the host on the external network first (tools/sandbox.sh
# reach on). --no-validation runs the tiny image without SSH, as before.
set -Eeuo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$SCRIPT_DIR/.." && pwd)
SANDBOX_DIR=${SANDBOX_DIR:-/var/tmp/nova-lxd-accel-sandbox}
TEMPEST_CONSTRAINTS=${TEMPEST_CONSTRAINTS:-$REPO_DIR/constraints.txt}
VENV=$SANDBOX_DIR/tempest-venv
WORK=$SANDBOX_DIR/tempest
SUBSET=ci
CONCURRENCY=2
VALIDATION=true

while [ $# -gt 0 ]; do
    case "$1" in
        --subset) SUBSET=$2; shift 2 ;;
        --concurrency) CONCURRENCY=$2; shift 2 ;;
        --no-validation) VALIDATION=false; shift ;;
        --regex) SUBSET=adhoc; ADHOC_REGEX=$2; shift 2 ;;
        -h | --help) sed -n '2,37p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "sandbox-tempest: unknown argument $1" >&2; exit 2 ;;
    esac
done

case "$SUBSET" in
    # tempest run --smoke cannot be combined with --regex: the smoke tag is
    # in the regex instead
    ci) REGEX='^tempest\.api\.(compute|image)\..*\[.*\bsmoke\b.*\]' ;;
    compute) REGEX='^tempest\.api\.compute\.|^tempest\.api\.(image|network)\..*\[.*\bsmoke\b.*\]' ;;
    multinode) REGEX='^tempest\.api\.compute\.admin\.(test_migrations|test_servers_on_multinodes)\.' ;;
    adhoc) REGEX=$ADHOC_REGEX ;;
    *) echo "sandbox-tempest: --subset is ci, compute or multinode" >&2; exit 2 ;;
esac

say() { printf 'sandbox-tempest: %s\n' "$*"; }
fail() { say "$*" >&2; exit 1; }

[ -f "$SANDBOX_DIR/clouds.yaml" ] ||
    fail "no sandbox in $SANDBOX_DIR: run tools/sandbox.sh up first"
export OS_CLIENT_CONFIG_FILE=$SANDBOX_DIR/clouds.yaml
OPENSTACK=$SANDBOX_DIR/venv/bin/openstack

if [ ! -x "$VENV/bin/tempest" ]; then
    say "installing tempest 47.0.0 and python-tempestconf 3.5.4 in $VENV"
    if [ -n "${SANDBOX_UV:-}" ]; then
        # uv (tools/run-tests.sh gives its own): from its cache, seconds
        "$SANDBOX_UV" venv -q --python python3 "$VENV"
        "$SANDBOX_UV" pip install -q --compile-bytecode \
            --python "$VENV/bin/python" \
            -c "$TEMPEST_CONSTRAINTS" tempest==47.0.0 python-tempestconf==3.5.4
    else
        python3 -m venv "$VENV"
        "$VENV/bin/pip" install -q -c "$TEMPEST_CONSTRAINTS" \
            tempest==47.0.0 python-tempestconf==3.5.4
    fi
fi

id_of() {  # id_of image|flavor NAME
    "$OPENSTACK" --os-cloud sandbox "$1" show "$2" -f value -c id ||
        fail "the sandbox has no $1 $2"
}
# tools/sandbox.sh up --hosts 2: a second nova-compute on its own daemon
HOSTS=$(cat "$SANDBOX_DIR/hosts" 2>/dev/null || echo 1)
if [ "$HOSTS" = 2 ]; then
    HOSTS_CONF=(compute-feature-enabled.cold_migration true
                compute.min_compute_nodes 2
                compute-feature-enabled.scheduler_enabled_filters
                "ComputeFilter,ComputeCapabilitiesFilter,ImagePropertiesFilter,ServerGroupAntiAffinityFilter,ServerGroupAffinityFilter,SameHostFilter,DifferentHostFilter")
    HOSTS_REASON="    compute-feature-enabled.cold_migration true   # up --hosts 2: the container moves to the other host's daemon over HTTPS"
else
    HOSTS_CONF=(compute-feature-enabled.cold_migration false
                compute.min_compute_nodes 1)
    HOSTS_REASON="    compute-feature-enabled.cold_migration false  # one compute host (tools/sandbox.sh up --hosts 2 has two)"
fi
[ "$SUBSET" != multinode ] || [ "$HOSTS" = 2 ] ||
    fail "--subset multinode needs two compute hosts: tools/sandbox.sh up --hosts 2"
FLAVOR=$(id_of flavor sandbox.small)
FLAVOR_ALT=$(id_of flavor sandbox.medium)
VALIDATION_CONF=()
if [ "$VALIDATION" = true ]; then
    IMAGE=$("$OPENSTACK" --os-cloud sandbox image show debian-12 \
        -f value -c id 2>/dev/null) ||
        fail "validation needs the Debian image: run tools/sandbox.sh image" \
            "debian first (or --no-validation)"
    # the same image under a second name (tools/sandbox.sh image debian
    # uploads both): the tests that filter servers by image need two
    IMAGE_ALT=$("$OPENSTACK" --os-cloud sandbox image show debian-12-alt \
        -f value -c id 2>/dev/null) || IMAGE_ALT=$IMAGE
    PUBLIC=$(id_of network public)
    "$REPO_DIR/tools/sandbox.sh" reach on
    VALIDATION_CONF=(
        validation.run_validation true
        validation.connect_method floating
        validation.auth_method keypair
        validation.image_ssh_user debian
        validation.image_alt_ssh_user debian
        validation.ip_version_for_ssh 4
        network.public_network_id "$PUBLIC"
        network.floating_network_name public
    )
else
    IMAGE=$(id_of image lxd-tiny)
    IMAGE_ALT=$IMAGE
    VALIDATION_CONF=(validation.run_validation false)
fi

if [ ! -f "$WORK/.stestr.conf" ]; then
    rm -rf "$WORK"
    # tempest registers workspaces by name in ~/.tempest/workspace.yaml; a
    # registration left by a removed sandbox (clean) would refuse init
    "$VENV/bin/tempest" workspace remove --name nova-lxd-accel-sandbox \
        >/dev/null 2>&1 || true
    "$VENV/bin/tempest" init --name nova-lxd-accel-sandbox "$WORK" \
        >"$SANDBOX_DIR/tempest-init.log" 2>&1 ||
        fail "tempest init failed: see $SANDBOX_DIR/tempest-init.log"
fi
mkdir -p "$WORK/results"
cd "$WORK"

# What the driver and the sandbox offer. Each "false" says why; the
# conformance page (tools/conformance-report.py) lists them.
FEATURES=(
    # on: the driver has them, the sandbox gives what they need
    compute-feature-enabled.resize true                           # resize and same-host resize (allow_resize_to_same_host)
    compute-feature-enabled.snapshot true                         # publish to Glance
    compute-feature-enabled.shelve true                           # snapshot, then the container is removed
    compute-feature-enabled.pause true                            # frozen container
    compute-feature-enabled.suspend true                          # frozen container
    compute-feature-enabled.console_output true                   # the container console log
    compute-feature-enabled.rescue true                           # a rescue container with the root disk attached
    compute-feature-enabled.hostname_fqdn_sanitization true       # the container's hostname is nova's sanitized one
    # off: inherent to containers or not in this driver
    compute-feature-enabled.live_migration false        # containers: refused, as by drivers without it
    compute-feature-enabled.vnc_console false           # containers have no graphical console
    compute-feature-enabled.spice_console false         # containers have no graphical console
    compute-feature-enabled.serial_console false        # not implemented
    compute-feature-enabled.change_password false       # needs a guest agent
    compute-feature-enabled.personality false           # deprecated file injection
    compute-feature-enabled.config_drive false          # user data goes through the LXD seed instead
    compute-feature-enabled.interface_attach true       # a NIC hot-plugged into the running container
    compute-feature-enabled.attach_encrypted_volume false  # no Cinder in the sandbox
    compute-feature-enabled.stable_rescue false         # rescue keeps the root disk of the image only
    # the sandbox's own limits
    auth.create_isolated_networks true                  # each test project gets its network, subnet and router (ML2/OVS)
    service_available.cinder false                      # no Cinder in the sandbox
    service_available.swift false                       # no Swift in the sandbox
)
overrides=()
for ((i = 0; i < ${#FEATURES[@]}; i += 2)); do
    section_key=${FEATURES[i]}
    overrides+=("${section_key%%.*}.${section_key#*.}" "${FEATURES[i + 1]}")
done
say "writing tempest.conf (offline: the sandbox's image and flavors)"
"$VENV/bin/discover-tempest-config" --os-cloud sandbox --create --no-rng \
    --no-default-deployer --image-disk-format raw --out etc/tempest.conf \
    compute.image_ref "$IMAGE" compute.image_ref_alt "$IMAGE_ALT" \
    compute.flavor_ref "$FLAVOR" compute.flavor_ref_alt "$FLAVOR_ALT" \
    "${overrides[@]}" "${HOSTS_CONF[@]}" "${VALIDATION_CONF[@]}" \
    >"$WORK/results/discover.log" 2>&1 ||
    fail "discover-tempest-config failed: see $WORK/results/discover.log"
# the reasons, for the conformance page
grep -E '^ +[a-z_-]+\.[a-z_]+ (true|false)' "$SCRIPT_DIR/sandbox-tempest.sh" |
    grep -v '^ *validation\.' >"$WORK/results/features.txt"
echo "$HOSTS_REASON" >>"$WORK/results/features.txt"
if [ "$VALIDATION" = true ]; then
    echo "    validation.run_validation true   # the Debian cloud-init image, SSH through a floating IP (tools/sandbox.sh reach on)" >>"$WORK/results/features.txt"
else
    echo "    validation.run_validation false  # --no-validation: the tiny image runs no SSH server" >>"$WORK/results/features.txt"
fi

say "tempest run --subset $SUBSET --concurrency $CONCURRENCY"
status=0
"$VENV/bin/tempest" run --concurrency "$CONCURRENCY" --regex "$REGEX" \
    --exclude-list "$SCRIPT_DIR/tempest-exclude.txt" \
    >"$WORK/results/$SUBSET.txt" 2>&1 || status=$?
cp "$SCRIPT_DIR/tempest-exclude.txt" "$WORK/results/excluded.txt"
"$VENV/bin/stestr" last --subunit >"$WORK/results/$SUBSET.subunit" || true
"$VENV/bin/python" "$SCRIPT_DIR/conformance-report.py" totals \
    "$WORK/results/$SUBSET.subunit" >"$WORK/results/$SUBSET.json"
echo "$HOSTS" >"$WORK/results/$SUBSET.hosts"
say "$SUBSET: $("$VENV/bin/python" -c '
import json, sys
r = json.load(open(sys.argv[1]))
print("%(passed)d passed, %(failed)d failed, %(skipped)d skipped" % r)
' "$WORK/results/$SUBSET.json")"
say "report: $WORK/results/$SUBSET.txt; subunit: $WORK/results/$SUBSET.subunit"
exit "$status"
