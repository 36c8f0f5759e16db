#!/bin/bash
# Mount lxcfs where the daemon looks for it, without systemd.
#
#   tools/lxcfs-up.sh /var/lib/lxcfs          # LXD
#   tools/lxcfs-up.sh /var/lib/incus-lxcfs    # Incus
#
# With lxcfs the daemon gives each container its own view of /proc/cpuinfo,
# /proc/meminfo, /proc/uptime...: a server of one vCPU counts one processor
# and sees its flavor's memory, as on a host where systemd starts lxcfs
# with the daemon. It applies to containers started after the mount.
# Optional: where lxcfs or /dev/fuse is missing, or the mount fails, the
# script says so and exits 0 (the containers then see the host's /proc).
set -uo pipefail

target=${1:?usage: lxcfs-up.sh MOUNT_DIR}
if grep -qs " $target fuse.lxcfs " /proc/self/mounts && \
        ! ls "$target" >/dev/null 2>&1; then
    # An lxcfs that died leaves its mount behind ("Transport endpoint is
    # not connected"): a new lxcfs cannot mount over it.
    echo "lxcfs-up: removing the stale mount on $target (its lxcfs is" \
         "gone)" >&2
    umount -l "$target" 2>/dev/null || fusermount -uz "$target" || true
fi
if mountpoint -q "$target" 2>/dev/null; then
    exit 0
fi
if ! command -v lxcfs >/dev/null 2>&1 || [ ! -e /dev/fuse ]; then
    echo "lxcfs-up: no lxcfs or no /dev/fuse: containers see the host's" \
         "/proc" >&2
    exit 0
fi
mkdir -p "$target"
# one pid file per mount: LXD's and Incus' lxcfs may run side by side
name=$(basename "$target")
(cd / && setsid lxcfs --pidfile="/run/lxcfs-$name.pid" "$target" \
    </dev/null >>"/var/log/lxcfs-$name.log" 2>&1 &)
for _ in $(seq 50); do
    mountpoint -q "$target" && { echo "lxcfs-up: lxcfs on $target"; exit 0; }
    sleep 0.1
done
echo "lxcfs-up: lxcfs did not mount $target (see" \
     "/var/log/lxcfs-$name.log): containers see the host's /proc" >&2
exit 0
