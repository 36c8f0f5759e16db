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
mirror=$(bash "$(dirname "${BASH_SOURCE[0]}")/debian-mirror.sh")
cat >"$list" <<SOURCES
Types: deb
URIs: $mirror
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
echo "backports: added $list"
