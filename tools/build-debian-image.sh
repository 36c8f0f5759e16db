#!/bin/bash
# Build an LXD unified image of Debian 12 (bookworm) with cloud-init,
# openssh-server, curl, cron and dbus (what tempest's validation and the
# MPS environment check use: systemd-run and systemctl need the bus), from the Debian mirror with mmdebstrap.
#
# Usage: build-debian-image.sh OUTPUT.tar.gz
#
# A real distribution for the sandbox: systemd boots it, systemd-networkd
# takes DHCP on eth0 (the Neutron port), cloud-init reads Nova's metadata
# and user data (the driver's NoCloud seed, or the nocloud-net templates
# below from the container's user.meta-data / user.user-data) and installs
# the key pair's public key for the user "debian". About 110 MB packed,
# 2 to 4 minutes to build on two cores; the mirror is the one apt uses
# (DEBIAN_MIRROR overrides it).
set -euo pipefail

out=${1:?usage: build-debian-image.sh OUTPUT.tar.gz}
suite=bookworm
mirror=${DEBIAN_MIRROR:-$(bash "$(dirname "${BASH_SOURCE[0]}")/debian-mirror.sh")}
if ! command -v mmdebstrap >/dev/null; then
    echo "build-debian-image: mmdebstrap not found; apt-get install" \
        "mmdebstrap" >&2
    exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/rootfs
mkdir -p "$root"
# cloud-init with its Debian dependencies; systemd-networkd and resolved
# (in systemd) for the network; no kernel, no bootloader: a container.
mmdebstrap --variant=apt --quiet \
    --include=systemd-sysv,cloud-init,openssh-server,netbase,iproute2,ifupdown,isc-dhcp-client,sudo,procps,curl,cron,dbus \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    "$suite" "$root" "$mirror"

# DHCP on eth0 before cloud-init asks for anything; cloud-init's own
# network rendering stays off (the port's address comes from Neutron's
# DHCP, the same as for every other image).
cat >"$root/etc/network/interfaces" <<'ENI'
auto lo
iface lo inet loopback

auto eth0
iface eth0 inet dhcp
ENI
# dhclient gives up after 60 s and ifup does not try again: on a loaded
# host Neutron's DHCP agent may answer a new network's first request
# later than that (seen under tempest). Five minutes, as systemd allows.
printf 'timeout 300;\n' >>"$root/etc/dhcp/dhclient.conf"
mkdir -p "$root/etc/cloud/cloud.cfg.d"
cat >"$root/etc/cloud/cloud.cfg.d/90-nova-lxd-accel.cfg" <<'CFG'
# nova-lxd-accel sandbox image: NoCloud only (the driver's seed, or the
# nocloud-net templates of this image); the network is configured by
# ifupdown from /etc/network/interfaces.
datasource_list: [NoCloud, None]
network: {config: disabled}
# C.UTF-8 is built in: no locales package, no locale-gen at boot
locale: C.UTF-8
CFG
# Unprivileged containers cannot register binary formats.
ln -sf /dev/null "$root/etc/systemd/system/systemd-binfmt.service"
# A container has no consoles to spawn getty on but the LXD console.
rm -f "$root/etc/systemd/system/getty.target.wants/getty@tty1.service"
# Host keys are made at first boot (cloud-init), never shared by images.
rm -f "$root"/etc/ssh/ssh_host_*
: >"$root/etc/machine-id"
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin

mkdir -p "$work/templates"
cat >"$work/templates/cloud-init-meta.tpl" <<'TPL'
{{ config_get("user.meta-data", "") }}
TPL
cat >"$work/templates/cloud-init-user.tpl" <<'TPL'
{{ config_get("user.user-data", properties.default) }}
TPL
cat >"$work/templates/hostname.tpl" <<'TPL'
{{ container.name }}
TPL
cat >"$work/metadata.yaml" <<META
architecture: $(uname -m)
creation_date: $(date +%s)
properties:
  description: Debian 12 (bookworm) with cloud-init and openssh-server, for the nova-lxd-accel sandbox
  os: debian
  release: $suite
templates:
  /var/lib/cloud/seed/nocloud-net/meta-data:
    when: [create, copy]
    template: cloud-init-meta.tpl
  /var/lib/cloud/seed/nocloud-net/user-data:
    when: [create, copy]
    template: cloud-init-user.tpl
    properties:
      default: |
        #cloud-config
        {}
  /etc/hostname:
    when: [create, copy]
    template: hostname.tpl
META
tar --numeric-owner -C "$work" -czf "$out.tmp" metadata.yaml templates rootfs
mv "$out.tmp" "$out"
echo "build-debian-image: wrote $out ($(du -h "$out" | cut -f1))"
