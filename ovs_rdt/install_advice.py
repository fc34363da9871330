"""What to install for a missing part, worded for how this copy of ovs-rdt
was installed: the Debian packages (apt-get), a virtualenv (pip), or a
Python the distribution manages (PEP 668: its pip refuses to install, so a
virtualenv first).  Standard library only: the emulator, which imports
nothing else of ovs_rdt, uses it too.
"""
from __future__ import annotations

import os
import sys
import sysconfig

#: Where Debian's python3-ovs-rdt puts the packages.
DEBIAN_SITE = '/usr/lib/python3/dist-packages'

DEBIAN, VIRTUALENV, MANAGED, OTHER = 'debian', 'virtualenv', 'managed', 'other'


def how_installed(module_file: str | None = None,
                  prefix: str | None = None, base_prefix: str | None = None,
                  stdlib: str | None = None) -> str:
    """:data:`DEBIAN`, :data:`VIRTUALENV`, :data:`MANAGED` (a system
    Python marked EXTERNALLY-MANAGED, e.g. a checkout run with Debian's
    python3) or :data:`OTHER`.
    """
    here = os.path.abspath(module_file or __file__)
    if here.startswith(DEBIAN_SITE + os.sep):
        return DEBIAN
    if (prefix or sys.prefix) != (base_prefix or sys.base_prefix):
        return VIRTUALENV
    marker = os.path.join(stdlib or sysconfig.get_path('stdlib'),
                          'EXTERNALLY-MANAGED')
    return MANAGED if os.path.exists(marker) else OTHER


def emulator(how: str | None = None) -> str:
    """How to get the emulator's parts (ovs_rdt.emulator, mfusepy, fuse3)."""
    how = how or how_installed()
    if how == DEBIAN:
        return 'apt-get install ovs-rdt-emulator (it brings python3-mfusepy ' \
            'and fuse3)'
    pip = 'pip install "ovs-rdt[emulator]"'
    if how == VIRTUALENV:
        return 'apt-get install fuse3; %s in this virtualenv (%s)' % (
            pip, sys.prefix)
    if how == MANAGED:
        return ('apt-get install fuse3; this Python is the distribution\'s '
                '(PEP 668: its pip refuses to install packages), so in a '
                'virtualenv: python3 -m venv --system-site-packages DIR && '
                'DIR/bin/%s (a checkout: tools/setup.sh demo does it)' % pip)
    return 'apt-get install fuse3; %s' % pip
