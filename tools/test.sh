#!/usr/bin/env bash
# The whole test suite: installs what is missing, then the suites in two
# lanes side by side (the machine has two cores and the real-parts suites
# spend much of their time waiting on daemons and guests), balanced so
# that both end about together:
#   first:   functional (real OvS, libvirt/KVM, the FUSE emulator,
#            packages, Prometheus, pqos);
#   second:  py3 (unit), pep8 (flake8/hacking + mypy), nova-functional (the
#            Nova plugin inside the real nova package, tests/nova, then
#            inside Nova's own functional framework with the real scheduler
#            and Placement, tests/nova_functional: one virtualenv for both),
#            then stress-quick (the stress suite on its CI budget; the long
#            run is tox -e stress).
# The first lane prints as it goes; the second lane's output follows it.
# TOXENVS=a,b runs those environments one after the other instead.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh

if [ -n "${TOXENVS:-}" ]; then
    exec .venv/bin/tox -e "$TOXENVS" -- "$@"
fi

REAL=functional
PY=py3,pep8,nova-functional,stress-quick
log=$(mktemp /tmp/ovs-rdt-tests-XXXXXX.log)
began=$(date +%s)
# Its own tox work dir: two tox runs must not build the package in the
# same place at the same time.
.venv/bin/tox --workdir .tox/lane-py -e "$PY" -- "$@" >"$log" 2>&1 &
py_pid=$!
stop_py() { kill -TERM -- "$py_pid" 2>/dev/null || true; }
trap 'stop_py; exit 130' INT
trap 'stop_py; exit 143' TERM

real_rc=0
.venv/bin/tox -e "$REAL" -- "$@" || real_rc=$?
py_rc=0
wait "$py_pid" || py_rc=$?
trap - INT TERM

echo
echo "== tox -e $PY (ran beside $REAL):"
cat "$log"
rm -f "$log"
echo
echo "== tools/test.sh: $REAL $([ $real_rc = 0 ] && echo passed || echo FAILED)," \
     "$PY $([ $py_rc = 0 ] && echo passed || echo FAILED)," \
     "in $(( $(date +%s) - began )) s"
[ "$real_rc" = 0 ] && [ "$py_rc" = 0 ]
