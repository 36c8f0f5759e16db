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
while :; do sleep 3600 & wait $!; done
INIT
chmod 755 "$root/sbin/init"
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
