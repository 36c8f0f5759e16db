#!/bin/bash
# Add Debian 12's bookworm-backports suite to apt's sources (idempotent),
# from the same mirror as the main suite, for Incus 6.0 LTS
# (incus-base, incus-client). Does not run apt-get update.
set -euo pipefail

list=/etc/apt/sources.list.d/bookworm-backports.sources
if grep -rqs 'bookworm-backports' /etc/apt/sources.list \
        /etc/apt/sources.list.d/; then
    exit 0
fi
# Either file may be missing (grep then exits 2): the default mirror.
mirror=$({ grep -hos 'https\?://[^ ]*/debian/\?\( \|$\)' \
    /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list || true; } |
    head -n1 | tr -d ' ')
cat >"$list" <<SOURCES
Types: deb
URIs: ${mirror:-http://deb.debian.org/debian}
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
echo "backports: added $list"
