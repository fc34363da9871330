#!/usr/bin/env bash
# The main job: installs what the demo is missing (bindep.txt's "demo"
# profile: FUSE, OvS, libvirt and QEMU, Debian's builds of the Python
# requirements, mfusepy), then runs "ovs-rdt demo" (seed 000's NFV cache
# layout on an emulated Xeon Gold 6230 with real KVM guests and a real
# ovs-vswitchd). Extra arguments go to "ovs-rdt demo" (e.g. --keep, --tcg).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh demo
exec .venv/bin/ovs-rdt demo "$@"
