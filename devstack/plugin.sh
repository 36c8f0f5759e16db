#!/bin/bash
# DevStack plugin of nova-lxd-accel: a dispatcher over DevStack's phases.
# The work is done by the functions of lib/nova-lxd-accel.
#
#   [[local|localrc]]
#   enable_plugin nova-lxd-accel https://opendev.example/nova-lxd-accel

# shellcheck source=devstack/lib/nova-lxd-accel
source "$(dirname "${BASH_SOURCE[0]}")/lib/nova-lxd-accel"

if [[ "$1" == "stack" ]]; then
    case "$2" in
        pre-install)
            echo_summary "Installing LXD for nova-lxd-accel"
            install_lxd
            configure_lxd
            ;;
        install)
            echo_summary "Installing nova-lxd-accel"
            install_nova_lxd_accel
            ;;
        post-config)
            echo_summary "Configuring Nova for nova-lxd-accel"
            configure_nova_lxd_accel
            ;;
        extra)
            echo_summary "Creating the LXD image and flavors"
            start_nova_lxd_accel
            create_nova_lxd_accel_image
            load_nova_lxd_accel_metadefs
            create_nova_lxd_accel_flavors
            ;;
        test-config)
            configure_tempest_nova_lxd_accel
            ;;
    esac
fi

if [[ "$1" == "unstack" ]]; then
    stop_nova_lxd_accel_instances
fi

if [[ "$1" == "clean" ]]; then
    cleanup_nova_lxd_accel
fi
