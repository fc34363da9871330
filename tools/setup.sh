#!/usr/bin/env bash
# Installs what a fresh Debian machine lacks for ovs-rdt, for one profile of
# bindep.txt:
#   tools/setup.sh [test]  the test suites (tools/test.sh): the "test"
#                          packages and a virtualenv (.venv) with tox and
#                          ovs-rdt;
#   tools/setup.sh demo    "ovs-rdt demo" only (tools/demo.sh): the "demo"
#                          packages and a .venv that uses Debian's builds of
#                          the requirements (no compiler), with mfusepy and
#                          ovs-rdt.
# Idempotent; run as root (apt-get, FUSE mounts, libvirtd).
set -euo pipefail
cd "$(dirname "$0")/.."

profile=${1:-test}
case "$profile" in
test|demo|build) ;;
*) echo "tools/setup.sh: unknown profile '$profile' (test, demo or build)" >&2
   exit 2 ;;
esac
if [ "$(id -u)" != 0 ]; then
    echo "tools/setup.sh: run as root (it installs Debian packages and mounts FUSE)" >&2
    exit 1
fi

# bindep.txt's lines of this profile (bindep's own syntax, read here: bindep
# itself is not in Debian 12).
pkgs=$(awk -v p="$profile" '/^[a-z0-9]/ && match($0, /\[platform:dpkg[^]]*\]/) {
    n = split(substr($0, RSTART + 15, RLENGTH - 16), sel, " ")
    for (i = 1; i <= n; i++) if (sel[i] == p) { print $1; break } }' bindep.txt)
pkgs="$pkgs python3 python3-venv git"
[ "$profile" = demo ] || pkgs="$pkgs python3-pip"
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "== installing Debian packages ($profile):$missing"
    export DEBIAN_FRONTEND=noninteractive
    # Packages with a daemon (prometheus) would start it from their init
    # script on a machine without systemd: the tests start their own.
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod 0755 /usr/sbin/policy-rc.d
        trap 'rm -f /usr/sbin/policy-rc.d' EXIT
    fi
    if ! apt-get update -qq >/tmp/ovs-rdt-apt.log 2>&1 || \
       ! apt-get install -y -qq --no-install-recommends $missing \
            >>/tmp/ovs-rdt-apt.log 2>&1; then
        tail -n 5 /tmp/ovs-rdt-apt.log >&2
        echo "tools/setup.sh: installing Debian packages failed (log:" \
             "/tmp/ovs-rdt-apt.log)" >&2
        exit 1
    fi
fi

# /dev/kvm for QEMU, which libvirt runs as libvirt-qemu (group kvm). Debian's
# udev rule (KERNEL=="kvm", GROUP="kvm", MODE="0660") does this where udev runs.
if [ -c /dev/kvm ]; then
    kvm_now=$(stat -c '%U:%G %a' /dev/kvm)
    if [ "$kvm_now" != "root:kvm 660" ] && [ "${kvm_now##* }" != 666 ]; then
        chown root:kvm /dev/kvm && chmod 0660 /dev/kvm
        echo "== /dev/kvm was $kvm_now: made it root:kvm 0660, as Debian's udev rule does"
    fi
else
    echo "== no /dev/kvm on this machine: 'ovs-rdt demo' runs its guests with TCG" \
         "(software emulation); the tests need OVS_RDT_TCG=1"
fi
if [ ! -c /dev/fuse ]; then
    modprobe fuse 2>/dev/null || true
    if [ ! -c /dev/fuse ]; then
        echo "tools/setup.sh: /dev/fuse is missing and 'modprobe fuse' did not" \
             "create it: the resctrl emulator needs FUSE" >&2
        exit 1
    fi
fi

[ "$profile" = build ] && exit 0

# The demo's .venv sees the Debian packages above (python3-libvirt, ...):
# they are for Debian's own Python, which a "python3" earlier on PATH (pyenv,
# a hand-built one) need not be.
if [ "$profile" = demo ] && [ -x /usr/bin/python3 ]; then
    PY=${PYTHON:-/usr/bin/python3}
else
    PY=${PYTHON:-python3}
fi
if [ -e .venv ] && [ ! -d .venv ]; then
    rm -f .venv    # a stray file (some tools write their env path there)
fi
if [ ! -x .venv/bin/python ]; then
    echo "== creating .venv"
    if [ "$profile" = demo ]; then
        # Debian's python3-libvirt, -ovsdbapp, ... (the demo profile).
        "$PY" -m venv --system-site-packages .venv
    else
        "$PY" -m venv .venv
    fi
fi
if [ "$profile" = demo ]; then
    # This checkout's ovs_rdt, not another one the system site packages
    # hold (a Debian python3-ovs-rdt installed on the host): an editable
    # install's import finder comes after them, so the checkout goes on
    # sys.path instead (editable_mode=compat: a .pth in .venv's own site
    # packages, read before the system's).
    here=$(pwd -P)
    if [ ! -x .venv/bin/ovs-rdt ] || ! .venv/bin/python -c 'import mfusepy' 2>/dev/null \
            || ! .venv/bin/python -I -c 'import os, sys, ovs_rdt; sys.exit(
                os.path.realpath(ovs_rdt.__file__) != sys.argv[1])' \
                "$here/ovs_rdt/__init__.py" 2>/dev/null; then
        echo "== installing ovs-rdt and mfusepy into .venv (log: .venv/pip.log)"
        # The requirements are Debian's (system site packages); what Debian
        # lacks, mfusepy, comes from PyPI. setuptools, wheel and pbr:
        # Debian's too.
        if ! .venv/bin/pip install -q --disable-pip-version-check \
                --no-build-isolation --config-settings editable_mode=compat \
                -e ".[emulator]" >.venv/pip.log 2>&1; then
            tail -n 30 .venv/pip.log >&2
            echo "tools/setup.sh: pip failed (full log: .venv/pip.log)" >&2
            exit 1
        fi
    fi
    exit 0
fi
if [ ! -x .venv/bin/tox ] || [ ! -x .venv/bin/ovs-rdt ] || [ setup.cfg -nt .venv/.installed ] \
        || [ requirements.txt -nt .venv/.installed ] \
        || [ test-requirements.txt -nt .venv/.installed ]; then
    echo "== installing tox and ovs-rdt into .venv (log: .venv/pip.log)"
    # pip's build backends print pages of deprecation notices: keep them in
    # the log and show its end only if something fails.
    if ! { .venv/bin/pip install -q --upgrade pip \
           && .venv/bin/pip install -q tox -r requirements.txt -r test-requirements.txt \
           && .venv/bin/pip install -q -e ".[emulator]"; } >.venv/pip.log 2>&1; then
        tail -n 30 .venv/pip.log >&2
        echo "tools/setup.sh: pip failed (full log: .venv/pip.log)" >&2
        exit 1
    fi
    touch .venv/.installed
fi
