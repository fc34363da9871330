#!/usr/bin/env bash
# The main job: installs what the demo is missing (bindep.txt's "demo"
# profile: FUSE, OvS, libvirt and QEMU, Debian's builds of the Python
# requirements, mfusepy), then runs "ovs-rdt demo" (seed 000's NFV cache
# layout on an emulated Xeon Gold 6230 with real KVM guests and a real
# ovs-vswitchd). Extra arguments go to "ovs-rdt demo" (e.g. --keep, --tcg).
# -h/--help prints the options and installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
for arg in "$@"; do
    case "$arg" in
    -h|--help)
        echo "usage: tools/demo.sh [OPTION]...: installs what the demo lacks" \
             "(tools/setup.sh demo, as root), then runs \"ovs-rdt demo" \
             "OPTION...\" from .venv/"
        echo
        # The options, from this tree, with no package installed (the
        # standard library is all "ovs-rdt demo --help" needs).
        if command -v python3 >/dev/null; then
            exec python3 -S -c 'import sys; sys.path.insert(0, ".")
from ovs_rdt.cmd.main import main
sys.exit(main(["demo", "--help"]))'
        fi
        echo "(python3 is not installed yet: the options are in README.md)"
        exit 0 ;;
    esac
done
bash tools/setup.sh demo
exec .venv/bin/ovs-rdt demo "$@"
