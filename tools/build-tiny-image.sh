#!/bin/bash
# Build a ~1 MB LXD unified image tarball from the host's busybox-static.
#
# Usage: build-tiny-image.sh OUTPUT.tar.gz
#
# No downloads: the rootfs is /bin/busybox plus one symlink per applet and
# an init script that exits on SIGPWR (LXD's clean-stop signal), so a clean
# stop takes well under a second.
set -euo pipefail

out=${1:?usage: build-tiny-image.sh OUTPUT.tar.gz}
busybox=$(command -v busybox || true)
if [ -z "$busybox" ] || ! file -L "$busybox" 2>/dev/null | grep -q static; then
    busybox=/bin/busybox
fi
if [ ! -x "$busybox" ]; then
    echo "build-tiny-image: busybox not found; install Debian's busybox-static" >&2
    exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/rootfs
mkdir -p "$root"/{bin,sbin,etc,proc,sys,dev,tmp,root,run,var/log}
cp "$busybox" "$root/bin/busybox"
for applet in $("$root/bin/busybox" --list); do
    [ "$applet" = busybox ] && continue
    [ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
done
rm -f "$root/sbin/init"
cat > "$root/sbin/init" <<'INIT'
#!/bin/sh
# Minimal init: say hello on the console, exit cleanly on LXD's stop signal.
echo "tiny init started"
trap 'echo "tiny init stopping"; exit 0' PWR TERM INT
# DHCP on each NIC the container was given (Neutron ports), in the
# background so that a stop is never delayed; the lease lines show on the
# console.
for nic in /sys/class/net/eth*; do
    [ -e "$nic" ] || continue
    udhcpc -b -i "${nic##*/}" -s /etc/udhcpc.script -x hostname:"$(hostname)" &
done
while :; do sleep 3600 & wait $!; done
INIT
chmod 755 "$root/sbin/init"
cat > "$root/etc/udhcpc.script" <<'DHCP'
#!/bin/sh
# busybox udhcpc calls this with the lease in the environment.
case "$1" in
    deconfig)
        ip addr flush dev "$interface"
        ip link set "$interface" up
        ;;
    bound | renew)
        ip addr flush dev "$interface"
        ip addr add "$ip/${mask:-24}" dev "$interface"
        [ -n "$mtu" ] && ip link set "$interface" mtu "$mtu"
        for gateway in $router; do
            ip route replace default via "$gateway" dev "$interface"
            break
        done
        # option 121: "destination/len gateway" pairs
        set -- $staticroutes
        while [ "$#" -ge 2 ]; do
            ip route replace "$1" via "$2" dev "$interface"
            shift 2
        done
        : > /etc/resolv.conf
        for server in $dns; do
            echo "nameserver $server" >> /etc/resolv.conf
        done
        echo "udhcpc: $interface $ip/${mask:-24} gateway ${router:-none}"
        ;;
esac
exit 0
DHCP
chmod 755 "$root/etc/udhcpc.script"
printf 'root:x:0:0:root:/root:/bin/sh\n' > "$root/etc/passwd"
printf 'root:x:0:\n' > "$root/etc/group"
chmod 1777 "$root/tmp"
cat > "$work/metadata.yaml" <<META
architecture: $(uname -m)
creation_date: $(date +%s)
properties:
  description: tiny busybox image for nova-lxd-accel tests
  os: busybox
  release: tiny
META
tar --numeric-owner --owner=0 --group=0 -C "$work" -czf "$out" metadata.yaml rootfs
echo "build-tiny-image: wrote $out ($(du -h "$out" | cut -f1))"
