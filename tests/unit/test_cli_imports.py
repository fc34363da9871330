"""``ovs-rdt``: only the chosen subcommand's module is imported."""
import subprocess
import sys

import pytest

from ovs_rdt.cmd import main

PROBE = '''
import sys
from ovs_rdt.cmd import main
try:
    main.main(sys.argv[1:])
except SystemExit:
    pass
mods = {m for _n, (m, _h) in main.SUBCOMMANDS.items()} & set(sys.modules)
print("IMPORTED", " ".join(sorted(mods)))
'''


def imported(*argv):
    res = subprocess.run([sys.executable, '-c', PROBE] + list(argv),
                         capture_output=True, text=True, timeout=60,
                         check=True)
    return res.stdout.rsplit('IMPORTED', 1)[1].split()


def test_only_the_chosen_subcommand_is_imported(tmp_path):
    # Before: every subcommand (the emulator's CLI and the demo included)
    # was imported to build the parser.
    conf = tmp_path / 'x.conf'
    conf.write_text('[resctrl]\nroot = %s\n' % tmp_path)
    assert imported('--config-file', str(conf), 'apply', '--help') == \
        ['ovs_rdt.cmd.apply']
    assert imported('--help') == []
    assert imported('install-hook', '--help') == ['ovs_rdt.cmd.install_hook']


@pytest.mark.parametrize('argv, name', [
    (['status'], 'status'),
    (['--config-file', 'demo', 'top', '--once'], 'top'),
    (['--debug', '--config-dir=/x', 'install-hook'], 'install-hook'),
    (['--config-file'], None),
    (['nonsense', 'apply'], None),
    # abbreviated as argparse accepts them: the value is not the command
    (['--config-f', 'status', 'top'], 'top'),
    (['--config-d', 'x', 'status', '--json'], 'status'),
    (['--config-f=status', 'top'], 'top'),
])
def test_chosen(argv, name):
    assert main.chosen(argv) == name


def test_the_chosen_subcommands_arguments_still_parse(capsys):
    assert main.main(['apply', '--dry-run', '--config-file',
                      '/nonexistent/x.conf']) == 2
    assert 'config file /nonexistent/x.conf does not exist' in \
        capsys.readouterr().err
    with pytest.raises(SystemExit):
        main.main(['emulate', '--help'])
    assert '--footprints' in capsys.readouterr().out


def test_an_abbreviated_option_keeps_the_subcommands_arguments(
        tmp_path, capsys):
    conf = tmp_path / 'x.conf'
    conf.write_text('')
    with pytest.raises(SystemExit):
        main.main(['--config-f', str(conf), 'status', '--help'])
    assert '--json' in capsys.readouterr().out
