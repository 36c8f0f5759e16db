#!/bin/bash
# Scenarios and stubs are called indirectly (by name, or through sudo).
# shellcheck disable=SC2317,SC2032,SC2033
# Test the DevStack plugin without DevStack.
#
# Each scenario sources devstack/settings and devstack/plugin.sh, with
# DevStack's functions and the system commands stubbed (stubs.sh), in a
# subshell of its own with a scratch directory and a PATH holding only a
# few harmless tools; it drives the phases the way stack.sh, unstack.sh and
# clean.sh do, then checks the nova.conf and tempest.conf the plugin wrote
# and the commands it would have run. Hosts with accelerators are
# simulated with the saved LXD /1.0/resources files of
# tests/unit/accel/samples/, fed to the real "nova-lxd-accel inventory".
#
# Usage: tests/devstack/run.sh [SCENARIO...]
# Needs nova-lxd-accel on PATH (or NOVA_LXD_ACCEL_BIN): tox -e devstack.
# Exit status: the number of failed scenarios (0: all passed).
set -u

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE=$REPO/tests/devstack
SAMPLES=$REPO/tests/unit/accel/samples
INVENTORY_BIN=${NOVA_LXD_ACCEL_BIN:-$(command -v nova-lxd-accel || true)}
if [[ -z "$INVENTORY_BIN" ]]; then
    echo "run.sh: nova-lxd-accel not found: install the package (tox -e" \
         "devstack does) or set NOVA_LXD_ACCEL_BIN" >&2
    exit 2
fi
INVENTORY_BIN=$(cd "$(dirname "$INVENTORY_BIN")" && pwd)/${INVENTORY_BIN##*/}
# Tools the plugin may run for real; everything else is a stub or absent.
SYS_TOOLS="python3 mkdir rm grep dirname cat chmod sed head tee"

# --- Assertions (inside a scenario) ---------------------------------------

fail() {
    echo "    FAIL: $*" | tee -a "$WORK/failures" >&2
}

assert_ran() {
    grep -qxF -- "$1" "$CMDLOG" || fail "did not run: $1"
}

assert_not_ran() {
    ! grep -qF -- "$1" "$CMDLOG" || \
        fail "ran unexpectedly: $(grep -F -- "$1" "$CMDLOG" | head -1)"
}

assert_count() {
    local n
    n=$(grep -cF -- "$1" "$CMDLOG")
    [[ "$n" == "$2" ]] || fail "'$1' ran $n times, expected $2"
}

# assert_ini FILE SECTION OPTION EXPECTED ("<unset>": no such option)
assert_ini() {
    local got
    got=$(python3 - "$1" "$2" "$3" <<'PY'
import configparser
import sys

parser = configparser.RawConfigParser(strict=False)
parser.optionxform = str
parser.read(sys.argv[1])
print(parser.get(sys.argv[2], sys.argv[3], fallback='<unset>'))
PY
)
    [[ "$got" == "$4" ]] || fail "$1 [$2] $3 = '$got', expected '$4'"
}

# assert_documented GREP_PATTERN: every recorded command matching the
# pattern is, written the way an operator types it, a command of the admin
# guide (doc/source/admin/*.rst, continuation lines joined).
assert_documented() {
    local line cmd found=0
    while IFS= read -r line; do
        found=1
        cmd=${line/#openstack --os-cloud $NOVA_LXD_ACCEL_OS_CLOUD /openstack }
        cmd=${cmd/#install_package /sudo apt-get install -y --no-install-recommends }
        if [[ "$cmd" =~ ^(.*\ --file\ )([^ ]*/)([^/ ]+\ [^ ]+)$ ]]; then
            cmd=${BASH_REMATCH[1]}${BASH_REMATCH[3]}
        fi
        grep -qxF -- "$cmd" "$DOC_COMMANDS" || \
            fail "not in the admin guide: $cmd"
    done < <(grep -E -- "$1" "$CMDLOG")
    [[ "$found" == 1 ]] || fail "nothing ran matching $1"
}

# --- Scenario plumbing -----------------------------------------------------

# setup: the scratch tree of one scenario; defaults of a single node with
# the controller services and a compute on Debian.
setup() {
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/devstack-plugin-test.XXXXXX")
    mkdir -p "$WORK/sysbin" "$WORK/bin" "$WORK/src/tools" \
        "$WORK/etc/nova" "$WORK/systemd"
    local tool
    for tool in $SYS_TOOLS; do
        ln -s "$(command -v "$tool")" "$WORK/sysbin/$tool"
    done
    # The interpreter itself, not a wrapper such as a pyenv shim.
    ln -sf "$(python3 -c 'import sys; print(sys.executable)')" \
        "$WORK/sysbin/python3"
    export PATH=$WORK/sysbin
    DOC_COMMANDS=$WORK/doc-commands
    python3 - "$REPO"/doc/source/admin/*.rst > "$DOC_COMMANDS" <<'PY'
import sys

for path in sys.argv[1:]:
    with open(path) as f:
        text = f.read().replace('\\\n', ' ')
    for line in text.splitlines():
        print(' '.join(line.split()))
PY
    # shellcheck source=tests/devstack/stubs.sh
    source "$HERE/stubs.sh"

    # What DevStack defines before plugins run.
    DEST=$WORK/opt
    DATA_DIR=$WORK/data
    STACK_USER=stack
    NOVA_CONF=$WORK/etc/nova/nova.conf
    NOVA_BIN_DIR=$WORK/bin
    SYSTEMD_DIR=$WORK/systemd
    TEMPEST_CONFIG=$WORK/tempest.conf
    ENABLED_SERVICES=key,n-api,n-cond,n-sch,n-cpu,placement-api,g-api,tempest
    os_VENDOR=Debian
    printf '[DEFAULT]\ndebug = True\n' > "$NOVA_CONF"

    # The plugin's checkout: its build-tiny-image.sh only records.
    export NOVA_LXD_ACCEL_DIR=$WORK/src
    cat > "$WORK/src/tools/build-tiny-image.sh" <<'SH'
#!/bin/bash
echo "build-tiny-image.sh $*" >> "$CMDLOG"
echo image > "$1"
SH
    # nova-manage records; nova-lxd-accel is the real one, never allowed to
    # reach the real LXD.
    local manage
    for manage in nova-manage glance-manage; do
        # shellcheck disable=SC2016
        printf '#!/bin/bash\necho "%s $*" >> "$CMDLOG"\n' "$manage" \
            > "$WORK/bin/$manage"
    done
    GLANCE_BIN_DIR=$WORK/bin
    GLANCE_CONF_DIR=$WORK/etc/glance
    GLANCE_METADEF_DIR=$WORK/etc/glance/metadefs
    cat > "$WORK/bin/nova-lxd-accel" <<SH
#!/bin/bash
echo "nova-lxd-accel \$*" >> "\$CMDLOG"
case " \$* " in
    *" --resources-file "*) ;;
    *) echo "harness: inventory without --resources-file" >&2; exit 3 ;;
esac
exec "$INVENTORY_BIN" "\$@" --nodename cn1
SH
    chmod +x "$WORK/src/tools/build-tiny-image.sh" "$WORK/bin/"*
    NOVA_LXD_ACCEL_RESOURCES_FILE=$SAMPLES/maas-lp2067998-thunderx-sriov-vfs.json
    : > "$WORK/no-mig.txt"
    NOVA_LXD_ACCEL_NVIDIA_SMI_LIST=$WORK/no-mig.txt
}

load_plugin_settings() {
    # shellcheck source=devstack/settings
    source "$REPO/devstack/settings"
}

# phase ARGS...: source plugin.sh as stack.sh/unstack.sh/clean.sh do.
phase() {
    # shellcheck source=devstack/plugin.sh
    source "$REPO/devstack/plugin.sh" "$@"
}

stack() {
    local p
    for p in pre-install install post-config extra test-config; do
        phase stack "$p"
    done
}

# flavor_created NAME: the recorded flavor create line of NAME.
flavor_created() {
    grep -E "^openstack .* flavor create .* $1\$" "$CMDLOG"
}

# --- Scenarios ---------------------------------------------------------------

scenario_debian_host_without_accelerators() {
    load_plugin_settings
    # devstack@n-cpu as run_process writes it, before the extra phase.
    printf '[Unit]\nDescription = Devstack devstack@n-cpu.service\n\n' \
        > "$SYSTEMD_DIR/devstack@n-cpu.service"
    printf '[Service]\nUser = stack\n' >> "$SYSTEMD_DIR/devstack@n-cpu.service"
    stack

    assert_ran "install_package lxd lxd-client busybox-static"
    assert_ran "sudo systemctl enable --now lxd.socket lxd.service"
    assert_not_ran "snap install"
    assert_ran "sudo lxd waitready --timeout=120"
    assert_ran "sudo groupadd --system lxd"
    assert_ran "add_user_to_group stack lxd"
    assert_ran "sudo lxc storage create default dir"
    assert_not_ran "incus"
    assert_not_ran "project create"
    assert_ran "setup_develop $WORK/src"

    assert_ini "$NOVA_CONF" DEFAULT debug True
    assert_ini "$NOVA_CONF" DEFAULT compute_driver lxd_accel.LXDDriver
    assert_ini "$NOVA_CONF" DEFAULT allow_resize_to_same_host True
    assert_ini "$NOVA_CONF" lxd storage_pool default
    assert_ini "$NOVA_CONF" lxd project default
    assert_ini "$NOVA_CONF" lxd_accelerators gpu_vendor_ids ""
    assert_ini "$NOVA_CONF" lxd_accelerators report_mig False
    assert_ini "$NOVA_CONF" lxd_accelerators report_infiniband False
    assert_ini "$NOVA_CONF" lxd_accelerators report_infiniband_ports False
    assert_ran "nova-lxd-accel inventory --format json --config-file $NOVA_CONF --resources-file $NOVA_LXD_ACCEL_RESOURCES_FILE --nvidia-smi-list $WORK/no-mig.txt"

    assert_ini "$SYSTEMD_DIR/devstack@n-cpu.service" Service User stack
    assert_ini "$SYSTEMD_DIR/devstack@n-cpu.service" Service \
        SupplementaryGroups lxd
    assert_ran "sudo systemctl restart devstack@n-cpu.service"
    assert_ran "nova-manage cell_v2 discover_hosts --verbose"

    local image=$DATA_DIR/nova-lxd-accel/tiny-lxd.tar.gz
    assert_ran "build-tiny-image.sh $image"
    assert_ran "openstack --os-cloud devstack-admin image create --public --disk-format raw --container-format bare --property hypervisor_type=lxc --file $image tiny-lxd"
    assert_ran "openstack --os-cloud devstack-admin --os-compute-api-version 2.55 flavor create --public --vcpus 1 --ram 512 --disk 1 --description \"1 vCPU, 512 MiB RAM, 1 GiB disk: an unprivileged LXD container\" lxd.small"
    assert_count "flavor create" 1
    assert_documented "^(install_package|sudo (systemctl enable|lxd|lxc .* create) )"
    assert_documented "(image|flavor) create"
    assert_ran "sudo cp $WORK/src/etc/glance/metadefs/compute-lxd.json $GLANCE_METADEF_DIR/"
    assert_ran "glance-manage --config-file $GLANCE_CONF_DIR/glance-api.conf db_load_metadefs $GLANCE_METADEF_DIR"

    assert_ini "$TEMPEST_CONFIG" compute image_ref id-tiny-lxd
    assert_ini "$TEMPEST_CONFIG" compute flavor_ref id-lxd.small
    assert_ini "$TEMPEST_CONFIG" compute-feature-enabled resize True
    assert_ini "$TEMPEST_CONFIG" compute-feature-enabled interface_attach True
    assert_ini "$TEMPEST_CONFIG" compute-feature-enabled cold_migration False
    assert_ini "$TEMPEST_CONFIG" compute-feature-enabled live_migration False
    assert_ini "$TEMPEST_CONFIG" compute-feature-enabled \
        attach_encrypted_volume False
    assert_ini "$TEMPEST_CONFIG" compute-feature-enabled snapshot True
    assert_ini "$TEMPEST_CONFIG" validation run_validation False

    # A second stack.sh creates nothing twice.
    phase stack extra
    assert_count "image create" 1
    assert_count "flavor create" 1

    FAKE_CONTAINERS=$'nova-1b2c\nhandmade'
    phase unstack
    assert_ran "sudo lxc stop --force --project default nova-1b2c"
    assert_not_ran "handmade"
    phase clean
    assert_ran "sudo lxc delete --force --project default nova-1b2c"
    [[ ! -e "$DATA_DIR/nova-lxd-accel" ]] || fail "clean left the data dir"
}

scenario_debian12_incus_backend() {
    LXD_BACKEND=incus
    os_CODENAME=bookworm
    INCUS_DAEMON=$WORK/no-incusd
    load_plugin_settings
    printf '[Service]\nUser = stack\n' > "$SYSTEMD_DIR/devstack@n-cpu.service"
    stack

    assert_ran "sudo tee /etc/apt/sources.list.d/bookworm-backports.sources"
    assert_ran "sudo apt-get install -y --no-install-recommends -t bookworm-backports incus-base incus-client busybox-static"
    assert_ran "sudo systemctl enable --now incus.socket incus.service"
    assert_ran "sudo incus admin waitready --timeout=120"
    assert_ran "sudo groupadd --system incus-admin"
    assert_ran "add_user_to_group stack incus-admin"
    assert_ran "sudo incus storage create default dir"
    assert_not_ran "sudo lxc "
    assert_not_ran "lxd waitready"
    assert_not_ran "install_package lxd"
    assert_not_ran "snap"
    assert_documented "^sudo (apt-get install|systemctl enable|incus .* create|incus admin)"
    assert_ini "$NOVA_CONF" lxd endpoint /var/lib/incus/unix.socket
    assert_ini "$NOVA_CONF" lxd storage_pool default
    assert_ini "$SYSTEMD_DIR/devstack@n-cpu.service" Service \
        SupplementaryGroups incus-admin
    assert_ran "openstack --os-cloud devstack-admin --os-compute-api-version 2.55 flavor create --public --vcpus 1 --ram 512 --disk 1 --description \"1 vCPU, 512 MiB RAM, 1 GiB disk: an unprivileged LXD container\" lxd.small"

    FAKE_CONTAINERS=$'nova-1b2c\nhandmade'
    phase unstack
    assert_ran "sudo incus stop --force --project default nova-1b2c"
    phase clean
    assert_ran "sudo incus delete --force --project default nova-1b2c"
    assert_not_ran "handmade"
}

scenario_debian13_picks_incus_and_keeps_an_installed_one() {
    # auto on Debian 13 (its LXD is frozen): Incus, here already installed.
    os_VENDOR=Debian
    os_RELEASE=13
    os_CODENAME=trixie
    unset -f lxc
    incus() { _fake_daemon_cli "$@"; }
    INCUS_DAEMON=$(command -v python3)
    echo "storage default" > "$LXD_STATE"
    load_plugin_settings
    stack

    assert_not_ran "apt-get"
    assert_not_ran "install_package"
    assert_ran "sudo incus admin waitready --timeout=120"
    assert_ini "$NOVA_CONF" lxd endpoint /var/lib/incus/unix.socket
    assert_not_ran "storage create"
}

scenario_lxd_backend_is_the_default_on_debian12() {
    os_RELEASE=12
    load_plugin_settings
    stack
    assert_ran "install_package lxd lxd-client busybox-static"
    assert_not_ran "incus"
    assert_ini "$NOVA_CONF" lxd endpoint "/var/lib/lxd/unix.socket"
}

scenario_unknown_backend_stops_the_phase() {
    LXD_BACKEND=docker
    load_plugin_settings
    if (phase stack pre-install) 2>/dev/null; then
        fail "pre-install passed with LXD_BACKEND=docker"
    fi
    assert_ran "die LXD_BACKEND must be lxd, incus or auto, not 'docker'"
    assert_not_ran "install_package"
}

scenario_ubuntu_snap_host_with_two_gpus() {
    os_VENDOR=Ubuntu
    LXD_PROJECT=nova
    LXD_STORAGE_DRIVER=zfs
    LXD_STORAGE_SOURCE=/dev/sdb
    NOVA_LXD_ACCEL_IMAGE_FILE=https://images.example.org/jammy-lxd.tar.gz
    NOVA_LXD_ACCEL_RESOURCES_FILE=$SAMPLES/handmade-lxd-two-a100-no-nvidia-object.json
    FAKE_GROUPS=lxd
    nvidia-container-cli() { :; }
    load_plugin_settings
    stack

    assert_ran "install_package snapd busybox-static"
    assert_ran "sudo snap install lxd --channel=5.21/stable"
    assert_not_ran "install_package lxd"
    assert_not_ran "groupadd"
    assert_ran "sudo lxc storage create default zfs source=/dev/sdb"
    assert_ran "sudo lxc project create nova"
    assert_ini "$NOVA_CONF" lxd project nova
    assert_ini "$NOVA_CONF" lxd_accelerators gpu_vendor_ids 10de,1002
    assert_ini "$NOVA_CONF" lxd_accelerators report_mig True
    assert_ini "$NOVA_CONF" lxd_accelerators report_infiniband True
    assert_ini "$NOVA_CONF" lxd_accelerators report_infiniband_ports False
    assert_ini "$NOVA_CONF" lxd_accelerators excluded_pci_addresses ""

    assert_ran "get_extra_file https://images.example.org/jammy-lxd.tar.gz"
    assert_not_ran "build-tiny-image"
    assert_ran "openstack --os-cloud devstack-admin image create --public --disk-format raw --container-format bare --property hypervisor_type=lxc --file $WORK/files/jammy-lxd.tar.gz tiny-lxd"
    assert_ran "openstack --os-cloud devstack-admin --os-compute-api-version 2.55 flavor create --public --vcpus 1 --ram 512 --disk 1 --description \"1 vCPU, 512 MiB RAM, 1 GiB disk: 1 whole GPU, any model, with NVIDIA's user space (nvidia.runtime)\" --property resources:PGPU=1 --property lxd:gpu_runtime=nvidia lxd.gpu"
    assert_ran "openstack --os-cloud devstack-admin --os-compute-api-version 2.55 flavor create --public --vcpus 1 --ram 512 --disk 1 --description \"1 vCPU, 512 MiB RAM, 1 GiB disk: 1 whole NVIDIA A100 SXM4 80GB GPU, with NVIDIA's user space (nvidia.runtime)\" --property resources:PGPU=1 --property trait:CUSTOM_GPU_MODEL_NVIDIA_A100_SXM4_80GB=required --property lxd:gpu_runtime=nvidia lxd.gpu.nvidia-a100-sxm4-80gb"
    # the two A100s are one pool (same PCI ids; the one without LXD's
    # nvidia object gets the model the other has): both in one group
    assert_ran "openstack --os-cloud devstack-admin --os-compute-api-version 2.55 flavor create --public --vcpus 1 --ram 512 --disk 1 --description \"1 vCPU, 512 MiB RAM, 1 GiB disk: 2 whole NVIDIA A100 SXM4 80GB GPUs on one host, with NVIDIA's user space (nvidia.runtime)\" --property resources:PGPU=2 --property trait:CUSTOM_GPU_MODEL_NVIDIA_A100_SXM4_80GB=required --property lxd:gpu_runtime=nvidia lxd.gpu.nvidia-a100-sxm4-80gb.x2"
    assert_count "flavor create" 4
    assert_documented "^sudo (snap|lxc .* create)"
    assert_documented "flavor create"
    # No devstack@n-cpu unit here: nothing to restart.
    assert_not_ran "systemctl restart"
}

scenario_mig_host_with_lxd_already_installed() {
    LXD_INSTALL_METHOD=auto
    NOVA_LXD_ACCEL_RESOURCES_FILE=$SAMPLES/handmade-lxd-h100-mig-host.json
    NOVA_LXD_ACCEL_NVIDIA_SMI_LIST=$SAMPLES/nvsmi-h100-80gb-mig-4slices-L.txt
    lxd() { :; }
    echo "storage default" > "$LXD_STATE"
    load_plugin_settings
    stack

    assert_not_ran "install_package"
    assert_not_ran "snap"
    assert_not_ran "storage create"
    assert_ran "sudo lxd waitready --timeout=120"
    assert_ini "$NOVA_CONF" lxd_accelerators report_mig True
    local profile slices words
    for profile in 1G_10GB 2G_20GB 3G_40GB; do
        local name=lxd.mig.${profile,,}
        name=${name//_/.}
        slices="${profile:0:1} compute slices"
        [[ "$profile" == 1G_* ]] && slices="1 compute slice"
        words="1 NVIDIA MIG slice ${name#lxd.mig.} of an NVIDIA H100 80GB HBM3"
        words+=" ($slices, ${profile:3:2} GB GPU memory)"
        assert_ran "openstack --os-cloud devstack-admin --os-compute-api-version 2.55 flavor create --public --vcpus 1 --ram 512 --disk 1 --description \"1 vCPU, 512 MiB RAM, 1 GiB disk: $words\" --property resources:CUSTOM_MIG_$profile=1 $name"
    done
    assert_documented "flavor create .* lxd.mig.1g.10gb"
    # A GPU split into MIG devices offers no whole GPU: no lxd.gpu.
    assert_not_ran "resources:PGPU"
    assert_not_ran "lxd:gpu_runtime"
    assert_count "flavor create" 4
}

scenario_infiniband_host() {
    NOVA_LXD_ACCEL_RESOURCES_FILE=$SAMPLES/handmade-lxd-connectx6-ib-vfs.json
    NOVA_LXD_ACCEL_EXCLUDED_PCI=0000:61:00.1
    load_plugin_settings
    stack

    assert_ini "$NOVA_CONF" lxd_accelerators excluded_pci_addresses \
        0000:61:00.1
    # whole ports are opt-in (a port's holder can be a subnet manager):
    # 0c:00.0, ports only, is not reported and gets no flavor
    assert_ini "$NOVA_CONF" lxd_accelerators report_infiniband_ports False
    assert_ran "openstack --os-cloud devstack-admin --os-compute-api-version 2.55 flavor create --public --vcpus 1 --ram 512 --disk 1 --description \"1 vCPU, 512 MiB RAM, 1 GiB disk: 1 InfiniBand virtual function (SR-IOV VF)\" --property resources:CUSTOM_INFINIBAND_VF=1 lxd.ib.vf"
    assert_not_ran "CUSTOM_INFINIBAND_PORT"
    assert_count "flavor create" 2
    assert_documented "flavor create"
}

scenario_infiniband_host_with_ports() {
    NOVA_LXD_ACCEL_RESOURCES_FILE=$SAMPLES/handmade-lxd-connectx6-ib-vfs.json
    NOVA_LXD_ACCEL_EXCLUDED_PCI=0000:61:00.1
    NOVA_LXD_ACCEL_INFINIBAND_PORTS=True
    load_plugin_settings
    stack

    assert_ini "$NOVA_CONF" lxd_accelerators report_infiniband_ports True
    assert_ran "openstack --os-cloud devstack-admin --os-compute-api-version 2.55 flavor create --public --vcpus 1 --ram 512 --disk 1 --description \"1 vCPU, 512 MiB RAM, 1 GiB disk: 1 InfiniBand virtual function (SR-IOV VF)\" --property resources:CUSTOM_INFINIBAND_VF=1 lxd.ib.vf"
    assert_ran "openstack --os-cloud devstack-admin --os-compute-api-version 2.55 flavor create --public --vcpus 1 --ram 512 --disk 1 --description \"1 vCPU, 512 MiB RAM, 1 GiB disk: 1 whole InfiniBand port\" --property resources:CUSTOM_INFINIBAND_PORT=1 lxd.ib.port"
    assert_count "flavor create" 3
    assert_documented "flavor create"
}

scenario_reporting_turned_off_on_a_gpu_host() {
    NOVA_LXD_ACCEL_REPORT=False
    NOVA_LXD_ACCEL_RESOURCES_FILE=$SAMPLES/handmade-lxd-6195-gtx970-from-text.json
    NOVA_LXD_ACCEL_FLAVOR_VCPUS=2
    NOVA_LXD_ACCEL_FLAVOR_RAM=2048
    NOVA_LXD_ACCEL_FLAVOR_DISK=5
    load_plugin_settings
    stack
    assert_ran "openstack --os-cloud devstack-admin --os-compute-api-version 2.55 flavor create --public --vcpus 2 --ram 2048 --disk 5 --description \"2 vCPUs, 2048 MiB RAM, 5 GiB disk: an unprivileged LXD container\" lxd.small"

    assert_ini "$NOVA_CONF" lxd_accelerators gpu_vendor_ids ""
    assert_ini "$NOVA_CONF" lxd_accelerators report_mig False
    assert_count "flavor create" 1
    assert_not_ran "PGPU"
}

scenario_compute_only_node() {
    ENABLED_SERVICES="n-cpu"
    NOVA_LXD_ACCEL_RESOURCES_FILE=$SAMPLES/handmade-lxd-6195-gtx970-from-text.json
    load_plugin_settings
    stack

    assert_ini "$NOVA_CONF" DEFAULT compute_driver lxd_accel.LXDDriver
    assert_ini "$NOVA_CONF" lxd_accelerators report_mig True
    assert_not_ran "openstack"
    assert_not_ran "nova-manage"
    assert_not_ran "glance-manage"
    [[ ! -e "$TEMPEST_CONFIG" ]] || fail "tempest.conf written"
}

scenario_api_only_node_leaves_nova_conf_alone() {
    ENABLED_SERVICES="n-api,g-api"
    load_plugin_settings
    stack

    assert_ini "$NOVA_CONF" DEFAULT compute_driver "<unset>"
    assert_ini "$NOVA_CONF" DEFAULT allow_resize_to_same_host "<unset>"
    assert_not_ran "nova-lxd-accel inventory"
    assert_ran "openstack --os-cloud devstack-admin --os-compute-api-version 2.55 flavor create --public --vcpus 1 --ram 512 --disk 1 --description \"1 vCPU, 512 MiB RAM, 1 GiB disk: an unprivileged LXD container\" lxd.small"
}

# Failures must stop stack.sh: each runs in a subshell of its own, as die
# exits.
scenario_failures_stop_the_phase() {
    load_plugin_settings
    if (NOVA_LXD_ACCEL_RESOURCES_FILE=$REPO/README.rst
        phase stack post-config) 2>/dev/null; then
        fail "post-config passed with a bad resources file"
    fi
    assert_ran "die nova-lxd-accel inventory failed: $NOVA_BIN_DIR/nova-lxd-accel inventory --format json --config-file $NOVA_CONF --resources-file $REPO/README.rst --nvidia-smi-list $WORK/no-mig.txt"
    if (LXD_INSTALL_METHOD=brew phase stack pre-install) 2>/dev/null; then
        fail "pre-install passed with LXD_INSTALL_METHOD=brew"
    fi
    assert_ran "die LXD_INSTALL_METHOD must be auto, package, snap or none, not 'brew'"
    if (NOVA_LXD_ACCEL_REPORT=maybe phase stack post-config) 2>/dev/null
    then
        fail "post-config passed with NOVA_LXD_ACCEL_REPORT=maybe"
    fi
    if (NOVA_LXD_ACCEL_IMAGE_FILE=$WORK/missing.tar.gz
        phase stack extra) 2>/dev/null; then
        fail "extra passed without the image file"
    fi
    assert_ran "die LXD image file $WORK/missing.tar.gz not found"
}

# --- Main ----------------------------------------------------------------

run_scenario() {
    local name=$1 rc
    (
        setup
        trap 'rm -rf "$WORK"' EXIT
        # A nested subshell: an unexpected die (exit) ends only the scenario.
        ("scenario_$name") > "$WORK/output.log" 2>&1
        rc=$?
        if [[ "$rc" != 0 || -s "$WORK/failures" ]]; then
            sed 's/^/    | /' "$WORK/output.log" >&2
            echo "    commands run:" >&2
            sed 's/^/    | /' "$CMDLOG" >&2
            exit 1
        fi
    )
    rc=$?
    if [[ "$rc" == 0 ]]; then
        echo "ok   $name"
    else
        echo "FAIL $name (status $rc)"
    fi
    return "$rc"
}

scenarios=("$@")
if [[ "${#scenarios[@]}" == 0 ]]; then
    mapfile -t scenarios < <(declare -F | sed -n 's/^declare -f scenario_//p')
fi
failures=0
for name in "${scenarios[@]}"; do
    run_scenario "$name" || failures=$((failures + 1))
done
echo "${#scenarios[@]} scenarios, $failures failed"
exit "$failures"
