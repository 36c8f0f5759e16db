#!/bin/bash
# Regenerate constraints.txt (the project's lock file) in a scratch venv.
#
# Installs the direct requirements of the driver, its tests, the sandbox
# cloud and the docs/tooling, checks they co-install, and writes every
# resolved version. Review the diff before committing.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
venv=$(mktemp -d)/venv
python3 -m venv "$venv"
"$venv/bin/pip" install -q \
    -r "$repo/requirements.txt" -r "$repo/test-requirements.txt" \
    keystone glance neutron python-openstackclient osc-placement PyMySQL cheroot \
    os-vif os-brick sphinx openstackdocstheme bashate tox tox-uv deptry \
    'SQLAlchemy<2.1'   # nova 34's test fixtures fail on 2.1 deprecations
"$venv/bin/pip" check
{
    sed -n '1,4p' "$repo/constraints.txt"
    "$venv/bin/pip" freeze | grep -v '^-e\|@ file' | sort -f
} > "$repo/constraints.txt.new"
mv "$repo/constraints.txt.new" "$repo/constraints.txt"
rm -rf "$(dirname "$venv")"
echo "constraints.txt updated"
