#!/bin/bash
# Print the Debian mirror apt uses for the main suite (deb822
# debian.sources or the one-line sources.list), or deb.debian.org.
# Used by backports.sh and build-debian-image.sh.
set -euo pipefail

# Either file may be missing (grep then exits 2): the default mirror.
mirror=$({ grep -hos 'https\?://[^ ]*/debian/\?\( \|$\)' \
    /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list || true; } |
    head -n1 | tr -d ' ')
echo "${mirror:-http://deb.debian.org/debian}"
