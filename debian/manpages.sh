#!/bin/sh
# Manual pages from --help and --version: manpages.sh BINDIR SITE OUTDIR VERSION
# (debian/rules). A command that cannot print its --help (a module missing
# from Build-Depends) fails the build here, rather than becoming its own
# manual page: its --help must exit 0, help2man reads standard output only,
# and a page that still holds a traceback is refused.
set -e
bindir=$1 site=$2 outdir=$3 version=$4
here=$(dirname "$0")
mkdir -p "$outdir"
for cmd in ovs-rdt ovs-rdt-agent; do
    PYTHONPATH=$site "$bindir/$cmd" --help >/dev/null
    PYTHONPATH=$site help2man --no-info --section=1 \
        --version-string="$version" \
        --name="$(sed -n "s/^$cmd: //p" "$here/manpage-names")" \
        --output="$outdir/$cmd.1" "$bindir/$cmd"
    if grep -q -e Traceback -e 'No module named' "$outdir/$cmd.1"; then
        echo "$outdir/$cmd.1 is an error, not a manual" >&2
        exit 1
    fi
done
