#!/usr/bin/env bash
# The whole test suite: installs what is missing, then unit, functional
# (real OvS, libvirt/KVM, the FUSE emulator), style/types, the Nova plugin
# inside the real nova package and inside Nova's own functional framework
# (nova-functional runs both, tests/nova and tests/nova_functional, in one
# virtualenv), and the stress suite on its CI budget (tox -e stress-quick;
# the long run is tox -e stress).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
exec .venv/bin/tox -e "${TOXENVS:-py3,functional,stress-quick,pep8,nova-functional}" -- "$@"
