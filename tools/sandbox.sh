#!/bin/bash
# One command, a real OpenStack on this machine.
#
# Usage: tools/sandbox.sh up [--backend lxd|incus] [--hardware NAME|DIR|none]
#                            [--with-horizon|--without-horizon]
#        tools/sandbox.sh down|status|clean|bench [N]|horizon-test|image debian [--build-only]
#        tools/sandbox.sh bench --density N [--wave W] [--idle S]
#        tools/sandbox.sh reach on|off
#
#   up      install what is missing (Debian: lxd, rabbitmq-server,
#           mariadb-server; PyPI: one venv pinned by constraints.txt), start
#           MariaDB, RabbitMQ, Keystone, Placement, Glance, Neutron (ML2/OVS
#           with its agents), Nova (api, conductor, scheduler) and a
#           nova-compute running this project's driver against the local LXD
#           or Incus, all on 127.0.0.1; register users, services, endpoints,
#           networks, an LXD image and flavors; write openrc and clouds.yaml.
#           Safe to re-run: it resumes.
#   down    stop every process "up" started, by pid.
#   status  show what runs, with pid, port, memory and log file.
#   clean   "down", then remove all state except the venv.
#   bench --density N   N servers in waves of W (25) on this driver, then on
#           Nova's fake driver: per wave create -> ACTIVE p50/p95 and where
#           the time went, idle CPU and RSS at checkpoints, memory per
#           container, delete p50/p95 (benchmarks/bench_sandbox_density.py);
#           --idle S: seconds of idle at each checkpoint (30).
#   bench N boot N servers on this driver and on Nova's fake driver, and N
#           raw launches; print the ratios.
#   horizon-test   the browser test against Horizon (up --with-horizon).
#   image debian   Debian 12 with cloud-init and openssh-server, in Glance
#           (--build-only: the cached tarball only, no cloud needed).
#   reach on|off   this host on the external network (203.0.113.254), so
#           that floating IPs answer here (tempest's SSH validation); the
#           servers still cannot connect to this host.
#
# Environment:
#   SANDBOX_DIR             state, logs, pids, venv
#                           (default /var/tmp/nova-lxd-accel-sandbox)
#   SANDBOX_COMPUTE_DRIVER  nova compute_driver (default lxd_accel.LXDDriver)
#   SANDBOX_PORT_BASE       first of the 100 ports used (default 26100;
#                           below the kernel's ephemeral port range, where
#                           any outgoing connection may take one)
#   SANDBOX_PYTHON          interpreter for the venv (default python3)
#   SANDBOX_CONSTRAINTS     pip constraints (default <repo>/constraints.txt)
#   SANDBOX_APT=0           never run apt-get (fail if a package is missing)
#   SANDBOX_BACKEND         lxd or incus (also: up --backend X); default:
#                           the daemon already running, else the
#                           distribution's own (Debian 12: lxd, 13: incus)
#   LXD_DIR                 LXD daemon directory (default /var/lib/lxd)
#   INCUS_DIR               Incus daemon directory (default /var/lib/incus)
#
# The commands and their steps are Python (standard library only, any
# Python 3): the package tools/sandbox (python3 -m tools.sandbox; README.md
# there: "How it is built"). This script only finds python3.
set -eu
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if ! command -v python3 >/dev/null 2>&1; then
    echo "sandbox: python3 is needed (Debian: apt-get install python3)" >&2
    exit 1
fi
SANDBOX_SCRIPT=$0 exec python3 "$SCRIPT_DIR/sandbox" "$@"
