#!/bin/bash
# Whether a shared-GPU instance's MPS client limits reach every process of
# the tenant (issue 29): an SSH command, the system manager's services, a
# user's manager and cron. Run against an instance of a flavor with
# lxd:gpu_memory_mb / lxd:gpu_compute_percent on a systemd image with sshd
# (the sandbox's Debian cloud-init image):
#
#   tools/mps-env-check.sh ssh -i KEY -o StrictHostKeyChecking=no debian@IP
#   MPS_ENV_EXPECT='CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=2048M' \
#       tools/mps-env-check.sh ssh ... debian@IP
#   MPS_ENV_CRON_WAIT=1 tools/mps-env-check.sh ...  # also a real cron job
#
# or, sourced, the function: mps_env_check ssh ... debian@IP
#
# The arguments are the SSH command prefix; each check appends one remote
# command. What each check saw is printed. The expected assignments are
# MPS_ENV_EXPECT (space separated) if set, else the block the driver wrote
# into the instance's /etc/environment (then it must be there). Exit
# status: 0 when every check that could run saw every assignment, 1 when
# one did not, 2 on a usage error. A check that cannot run on this image
# (no cron, no user manager) is reported as skipped.

_mps_env_missing() {
    # the assignments of $1 (expected) missing from the text $2
    local want missing=
    for want in $1; do
        grep -qxF -- "$want" <<<"$2" || missing="$missing $want"
    done
    printf '%s' "${missing# }"
}

_mps_env_report() {
    # _mps_env_report NAME EXPECTED OUTPUT RC
    local name=$1 expected=$2 output=$3 rc=$4 missing
    echo "--- $name (rc $rc):"
    grep '^CUDA_MPS_' <<<"$output" | sed 's/^/    /'
    missing=$(_mps_env_missing "$expected" "$output")
    if [ -n "$missing" ]; then
        echo "    MISSING: $missing"
        return 1
    fi
    echo "    ok"
}

mps_env_check() {
    if [ $# -eq 0 ]; then
        echo 'usage: mps_env_check SSH_COMMAND... (e.g. ssh -i key user@ip)' >&2
        return 2
    fi
    local expected output rc line failed=0
    # root, or sudo without a password, for the system-wide checks (it
    # runs in the instance: the single quotes are meant)
    # shellcheck disable=SC2016
    local root='if [ "$(id -u)" = 0 ]; then S=; else S="sudo -n"; fi;'
    expected=${MPS_ENV_EXPECT:-}
    if [ -z "$expected" ]; then
        expected=$("$@" "sed -n '/^# BEGIN nova-lxd-accel/,/^# END nova-lxd-accel/p' /etc/environment" |
                   grep '^CUDA_MPS_' | tr '\n' ' ')
        if [ -z "$expected" ]; then
            echo 'FAIL: no nova-lxd-accel block in the instance'"'"'s /etc/environment'
            return 1
        fi
    fi
    echo "expected: $expected"

    # sshd's PAM session (pam_env: /etc/environment), no login shell
    output=$("$@" env 2>&1); rc=$?
    _mps_env_report 'ssh command (pam_env)' "$expected" "$output" "$rc" ||
        failed=1

    # a login shell (profile scripts after the PAM session)
    output=$("$@" "bash -lc env" 2>&1); rc=$?
    _mps_env_report 'ssh login shell' "$expected" "$output" "$rc" ||
        failed=1

    # the system manager's environment block, and a real service's
    output=$("$@" "$root \$S systemctl show-environment" 2>&1); rc=$?
    _mps_env_report 'systemctl show-environment' "$expected" "$output" \
        "$rc" || failed=1
    output=$("$@" "$root \$S systemd-run --wait --pipe --quiet env" 2>&1)
    rc=$?
    _mps_env_report 'systemd-run service' "$expected" "$output" "$rc" ||
        failed=1

    # the login user's own manager (systemctl --user), where it runs
    output=$("$@" "systemctl --user show-environment" 2>&1); rc=$?
    if [ "$rc" -ne 0 ]; then
        echo "--- user manager: skipped (rc $rc: $(head -1 <<<"$output"))"
    else
        _mps_env_report 'systemctl --user show-environment' "$expected" \
            "$output" "$rc" || failed=1
    fi

    # cron: its PAM session must run pam_env, which reads /etc/environment
    output=$("$@" "grep -Hs '^[[:space:]]*session.*pam_env' /etc/pam.d/cron; env -i sh -c 'grep ^CUDA_MPS_ /etc/environment'" 2>&1)
    rc=$?
    if ! grep -q 'pam_env' <<<"$output"; then
        echo '--- cron (pam): /etc/pam.d/cron runs no pam_env (or no cron)'
        while IFS= read -r line; do echo "    $line"; done <<<"$output"
        failed=1
    else
        _mps_env_report 'cron (pam_env in /etc/pam.d/cron, env -i)' \
            "$expected" "$output" "$rc" || failed=1
    fi
    if [ -n "${MPS_ENV_CRON_WAIT:-}" ]; then
        # a real job of the cron daemon, within two minutes
        output=$("$@" "$root
            command -v cron >/dev/null || { echo 'no cron installed'; exit 3; }
            \$S rm -f /run/mps-env-check.txt
            echo '* * * * * root env > /run/mps-env-check.txt' |
                \$S tee /etc/cron.d/mps-env-check >/dev/null
            for _ in \$(seq 130); do
                [ -s /run/mps-env-check.txt ] && break; sleep 1
            done
            \$S rm -f /etc/cron.d/mps-env-check
            \$S cat /run/mps-env-check.txt" 2>&1)
        rc=$?
        if [ "$rc" -eq 3 ]; then
            echo '--- cron job: skipped (no cron installed)'
        else
            _mps_env_report 'cron job' "$expected" "$output" "$rc" ||
                failed=1
        fi
    fi
    return "$failed"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    mps_env_check "$@"
    exit $?
fi
