#!/bin/bash
# DevStack's functions and the system commands the plugin uses, stubbed.
#
# Sourced by run.sh inside one scenario's subshell, after WORK (a scratch
# directory) is set. Every stub appends the command it stands for to
# $CMDLOG; nothing here installs anything or touches the real system:
# the only real programs run are python3 (iniset, accel-flavors.py) and
# nova-lxd-accel (always with --resources-file).

export CMDLOG=$WORK/commands.log
: > "$CMDLOG"
LXD_STATE=$WORK/lxd-state
OS_STATE=$WORK/openstack-state
: > "$LXD_STATE"
: > "$OS_STATE"

record() {
    printf '%s\n' "$*" >> "$CMDLOG"
}

# --- DevStack functions -----------------------------------------------------

echo_summary() {
    echo "summary: $*"
}

die() {
    local line=$1
    shift
    record "die $*"
    echo "die (line $line): $*" >&2
    exit 1
}

is_service_enabled() {
    local service
    for service in "$@"; do
        [[ ",$ENABLED_SERVICES," == *",$service,"* ]] && return 0
    done
    return 1
}

install_package() { record "install_package $*"; }
setup_develop() { record "setup_develop $*"; }
add_user_to_group() { record "add_user_to_group $*"; }

get_extra_file() {
    record "get_extra_file $*"
    mkdir -p "$WORK/files"
    local file=$WORK/files/${1##*/}
    echo downloaded > "$file"
    echo "$file"
}

# iniset [-sudo] FILE SECTION OPTION VALUE, as DevStack's: creates the file
# and the section when missing, replaces the option's value in place.
iniset() {
    if [[ "$1" == "-sudo" ]]; then
        record "iniset $*"
        shift
    fi
    python3 - "$@" <<'PY'
import os
import sys

path, section, option, value = sys.argv[1:5]
lines = []
if os.path.exists(path):
    with open(path) as f:
        lines = f.read().splitlines()
out, current, done, seen = [], None, False, False
for line in lines:
    stripped = line.strip()
    if stripped.startswith('[') and stripped.endswith(']'):
        if current == section and not done:
            out.append('%s = %s' % (option, value))
            done = True
        current = stripped[1:-1]
        seen = seen or current == section
    elif (current == section and not done and '=' in stripped and
          stripped.split('=', 1)[0].strip() == option):
        out.append('%s = %s' % (option, value))
        done = True
        continue
    out.append(line)
if not done:
    if not seen:
        out.append('[%s]' % section)
    out.append('%s = %s' % (option, value))
os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
with open(path, 'w') as f:
    f.write('\n'.join(out) + '\n')
PY
}

# --- System commands ------------------------------------------------------

# sudo runs stubs (shell functions, scripts under $WORK); anything else is
# only recorded.
sudo() {
    record "sudo $*"
    if [[ "$(type -t "$1")" == "function" || "$1" == "$WORK"/* ]]; then
        "$@"
    fi
}

systemctl() { :; }
snap() { :; }
groupadd() { :; }

getent() {
    [[ "$1" == "group" && " ${FAKE_GROUPS:-} " == *" $2 "* ]]
}

# No lxd stub: "command -v lxd" must fail unless a scenario installs one.

# A fake LXD: pools and projects in $LXD_STATE, containers from
# $FAKE_CONTAINERS (one name per line).
lxc() {
    _fake_daemon_cli "$@"
}

# A fake Incus, the same as the fake LXD ("incus admin ..." does nothing).
incus() {
    _fake_daemon_cli "$@"
}

_fake_daemon_cli() {
    case "$1 $2" in
        "storage show"|"project show")
            grep -qx "$1 $3" "$LXD_STATE"
            ;;
        "storage create"|"project create")
            echo "$1 $3" >> "$LXD_STATE"
            ;;
        "list --project")
            printf '%s\n' "${FAKE_CONTAINERS:-}"
            ;;
        *)
            ;;
    esac
}

# A fake cloud: "create" remembers the object (last argument), "show"
# finds it and prints "id-<name>" for -f value -c id.
openstack() {
    # an argument with spaces (a description) is recorded in double quotes,
    # as the admin guide writes it
    local arg words=()
    for arg in "$@"; do
        if [[ "$arg" == *" "* ]]; then
            words+=("\"$arg\"")
        else
            words+=("$arg")
        fi
    done
    record "openstack ${words[*]}"
    if [[ "$3" == --os-compute-api-version ]]; then
        set -- "$1" "$2" "${@:5}"
    fi
    local kind=$3 verb=$4 name=$5
    case "$verb" in
        show)
            grep -qx "$kind $name" "$OS_STATE" || return 1
            echo "id-$name"
            ;;
        create)
            echo "$kind ${*: -1}" >> "$OS_STATE"
            ;;
    esac
}
