"""What a missing emulator part tells the user to install: apt-get for the
Debian packages, never a pip that PEP 668 refuses on a distribution's
Python (issue 38 item 8).
"""
from __future__ import annotations

import sys

from ovs_rdt import install_advice as adv


def test_how_installed(tmp_path) -> None:
    stdlib = tmp_path / 'lib'
    stdlib.mkdir()
    debian = '/usr/lib/python3/dist-packages/ovs_rdt/install_advice.py'
    assert adv.how_installed(debian, '/usr', '/usr', str(stdlib)) == \
        adv.DEBIAN
    tree = '/src/ovs-rdt/ovs_rdt/install_advice.py'
    assert adv.how_installed(tree, '/venv', '/usr', str(stdlib)) == \
        adv.VIRTUALENV
    assert adv.how_installed(tree, '/usr', '/usr', str(stdlib)) == adv.OTHER
    (stdlib / 'EXTERNALLY-MANAGED').write_text('[externally-managed]\n')
    assert adv.how_installed(tree, '/usr', '/usr', str(stdlib)) == \
        adv.MANAGED


def test_a_debian_user_is_sent_to_apt_not_pip() -> None:
    text = adv.emulator(adv.DEBIAN)
    assert text.startswith('apt-get install ovs-rdt-emulator')
    assert 'pip' not in text


def test_a_managed_python_gets_a_virtualenv_first() -> None:
    text = adv.emulator(adv.MANAGED)
    assert 'PEP 668' in text and 'python3 -m venv' in text
    assert adv.emulator(adv.VIRTUALENV).endswith(
        'pip install "ovs-rdt[emulator]" in this virtualenv (%s)' % sys.prefix)


def test_the_emulator_and_the_demo_say_it(monkeypatch) -> None:
    """ovs-rdt emulate without mfusepy, the demo without the emulator."""
    import builtins

    from ovs_rdt.cmd import demo, lifecycle
    from ovs_rdt.emulator import cli

    monkeypatch.setattr(adv, 'how_installed', lambda *a, **k: adv.DEBIAN)
    real_import = builtins.__import__

    def no_mfusepy(name, *args, **kwargs):
        if name == 'mfusepy':
            raise ImportError("No module named 'mfusepy'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, '__import__', no_mfusepy)
    monkeypatch.setattr(cli.os.path, 'ismount', lambda p: False)
    monkeypatch.setattr(cli.os.path, 'exists', lambda p: True)
    try:
        cli._check_mountpoint('/')
    except cli.EmulatorError as exc:
        assert str(exc) == ("FUSE is not usable: No module named 'mfusepy' "
                            "(apt-get install ovs-rdt-emulator (it brings "
                            "python3-mfusepy and fuse3))")
    else:
        raise AssertionError('no error')
    monkeypatch.undo()
    monkeypatch.setattr(adv, 'how_installed', lambda *a, **k: adv.DEBIAN)
    monkeypatch.setattr(lifecycle, 'importable', lambda m: m != 'mfusepy')
    lines = demo.missing_prerequisites(tcg=True)
    assert 'the resctrl emulator needs mfusepy: apt-get install ' \
        'ovs-rdt-emulator (it brings python3-mfusepy and fuse3)' in lines
