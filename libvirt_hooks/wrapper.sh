#!/bin/sh
# ovs-rdt libvirt hook wrapper (written by "ovs-rdt install-hook"; do not edit)
#
# libvirt runs every executable of /etc/libvirt/hooks/qemu.d/ as
#     50-ovs-rdt DOMAIN OPERATION SUB-OPERATION EXTRA < domain.xml
# with almost no environment.  This starts the ovs-rdt hook
# (libvirt_hooks/hook.py) for the events it handles, one process per event,
# with the interpreter, packages and configuration that "ovs-rdt
# install-hook" found; it asks no daemon, so a hook's failure touches only
# its own domain.  The file is libvirt_hooks/wrapper.sh of the ovs-rdt
# package, its settings block filled in.
#
# (The settings are literal: a '$' in a path is a '$'.)
# shellcheck disable=SC2016

# -- settings (filled in by "ovs-rdt install-hook") --
python=/usr/bin/python3
packages=/usr/lib/python3/dist-packages
config=''
# -- end of settings --

# The events the hook does nothing for (start begin, stopped end, attach
# begin, ...) end here, without starting Python: a VM start then runs two
# interpreters, a stop one.  Standard input is left unread: libvirt ignores
# the EPIPE of a hook that closed it early.
case "$2 $3" in
'prepare begin'|'started begin'|'release end'|'reconnect begin'|\
'migrate begin'|'restore begin') ;;
*) exit 0 ;;
esac

if [ -z "${OVS_RDT_HOOK_FAILED-}" ] && [ -x "$python" ] &&
        [ -f "$packages/libvirt_hooks/hook.py" ] &&
        [ -f "$packages/ovs_rdt/guest.py" ]; then
    # The hook's options first, then libvirt's four arguments, always the
    # last four (a domain named "-db" is a domain name).  Isolated mode
    # without site (-I -S): no environment variable, user site or .pth
    # file changes what runs as root; the packages go after the standard
    # library, where site would put them.  Should the hook not import, or
    # fail outside its own error handling, this file runs again with
    # OVS_RDT_HOOK_FAILED saying why (hook.fall_back), for the part below.
    eval "set -- $config"' "$@"'
    exec "$python" -I -S -c 'import sys
sys.path.append(sys.argv[2])
try:
    from libvirt_hooks.hook import main_once
except BaseException as exc:
    import os
    os.environ["OVS_RDT_HOOK_FAILED"] = " ".join(
        ("cannot import it: %s: %s" % (type(exc).__name__, exc)).split())
    os.execv("/bin/sh", ["/bin/sh"] + sys.argv[1:2] + sys.argv[-4:])
main_once(sys.argv[1], sys.argv[3:])' "$0" "$packages" "$@"
fi

# The hook cannot run: its interpreter or its packages are gone (a removed
# virtualenv, the package removed under this file) or broken.  Exit 1 at
# every event would make libvirt refuse every VM start and kill every
# running guest at its next restart (reconnect), so this does what the
# hook does by default ([libvirt] on_failure = refuse; the configuration
# cannot be read here): refuse a strict event of a domain whose XML names
# ovs-rdt, and let every other event through.  Logged either way.
why=${OVS_RDT_HOOK_FAILED:-$python or the ovs-rdt packages in $packages\
 are missing}
fix="reinstall ovs-rdt and re-run \"ovs-rdt install-hook\", or remove $0"
logger -t ovs-rdt-hook -p daemon.warning -- \
    "domain '$1' $2 $3: $fix: the ovs-rdt hook cannot run ($why)" 2>/dev/null
# The refusal line as the hook words it (hook.REFUSING), what to fix first.
# Any urn:ovs-rdt namespace counts: a mistyped one is refused by the hook.
case "$2" in
prepare) what='refusing to start' ;;
started) what='stopping' ;;
migrate) what='refusing the incoming migration of' ;;
restore) what='refusing to restore' ;;
*) exit 0 ;;
esac
case "$(head -c 4194304)" in
*urn:ovs-rdt*|*'"rdt:'*)
    printf "ovs-rdt: %s domain '%s': %s: the ovs-rdt hook cannot run (%s)\n" \
        "$what" "$1" "$fix" "$why" >&2
    exit 1 ;;
esac
exit 0
