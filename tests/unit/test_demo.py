"""``ovs-rdt demo``'s layout on every emulated profile (seed 000 Table 4)."""
from __future__ import annotations

import pytest

from ovs_rdt.cmd import demo
from ovs_rdt.emulator.profiles import PROFILES
from ovs_rdt.exceptions import RDTError


def test_eleven_ways_is_table4_exactly() -> None:
    assert demo.table4_masks(11) == {'hp': 0x7f0, 'system': 0xc,
                                     'noisy': 0x2}


@pytest.mark.parametrize('profile', sorted(PROFILES))
def test_every_profile_keeps_table4s_way_counts(profile: str) -> None:
    width = PROFILES[profile].cbm_len
    masks = demo.table4_masks(width)
    # hp on the highest ways, then the OS, then noisy, the rest free
    assert masks['hp'] >> (width - 7) == 0x7f
    assert masks['system'] == 0x3 << (width - 9)
    assert masks['noisy'] == 0x1 << (width - 10)
    assert not (masks['hp'] & masks['system'] or masks['hp'] & masks['noisy']
                or masks['system'] & masks['noisy'])
    assert masks['hp'] | masks['system'] | masks['noisy'] < 1 << width


def test_too_narrow_a_cbm_is_one_clear_error() -> None:
    with pytest.raises(RDTError, match='at least 11 ways .* this profile has '
                       '10'):
        demo.table4_masks(10)


def test_config_names_the_scaled_masks() -> None:
    text = demo.CONFIG.format(workdir='/w', root='/r', sysfs='/s',
                              connection='unix:/c', metrics='127.0.0.1:1',
                              vswitchd_pidfile='/p',
                              libvirt_uri='qemu:///system?socket=/l',
                              **demo.table4_masks(16))
    assert 'l3_cbm = fe00\n' in text and 'l3_cbm = 40\n' in text
    assert 'uri = qemu:///system?socket=/l\n' in text
    assert 'system_l3_cbm = 180\n' in text


class _BrokenPipe:
    """A stream whose reader went away (``ovs-rdt demo | head``)."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, 'Broken pipe')

    def flush(self) -> None:
        raise BrokenPipeError(32, 'Broken pipe')

    def isatty(self) -> bool:
        return False


class _FakeBox:
    def __init__(self, workdir: str) -> None:
        self.workdir = workdir
        self.torn_down = 0

    def save(self) -> None:
        pass

    def teardown(self) -> list[str]:
        self.torn_down += 1
        return []


def test_a_closed_output_pipe_still_tears_everything_down(
        monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``ovs-rdt demo 2>&1 | head``: printing fails half-way; the daemons,
    guests and mount must go all the same.
    """
    import argparse
    import signal

    from ovs_rdt import sandbox

    boxes: list[_FakeBox] = []

    def make_box(workdir: str) -> _FakeBox:
        boxes.append(_FakeBox(workdir))
        return boxes[-1]

    def main_job(box: _FakeBox, args: argparse.Namespace) -> None:
        print('Platform: ...')           # the pipe is closed: raises

    monkeypatch.setattr(sandbox, 'Sandbox', make_box)
    monkeypatch.setattr(demo, 'missing_prerequisites', lambda tcg: [])
    monkeypatch.setattr(demo, '_main_job', main_job)
    monkeypatch.setattr(signal, 'signal', lambda *a: None)
    monkeypatch.setattr('sys.stdout', _BrokenPipe())
    monkeypatch.setattr('sys.stderr', _BrokenPipe())
    args = argparse.Namespace(teardown=False, tcg=True, keep=False,
                              workdir=str(tmp_path / 'demo'))
    assert demo.run(None, args) == 1   # type: ignore[arg-type]
    assert [b.torn_down for b in boxes] == [1]


def test_metric_groups_read_by_prometheus_clients_parser() -> None:
    """The demo's metrics summary reads the agent's exposition with
    prometheus_client's parser: escaped label values, labels in any order
    and samples without a group are read as Prometheus reads them.
    """
    from prometheus_client import CollectorRegistry, Counter, Gauge
    from prometheus_client import generate_latest

    registry = CollectorRegistry()
    ways = Gauge('ovs_rdt_group_l3_ways', 'ways', ['domain', 'group'],
                 registry=registry)
    ways.labels('0', 'ovsrdt-pool-hp').set(7)
    ways.labels('1', 'ovsrdt-pool-hp').set(7)
    ways.labels('0', 'odd "name" {x}').set(1)
    Counter('ovs_rdt_bytes', 'bytes', ['group'],
            registry=registry).labels('/').inc()
    Gauge('ovs_rdt_up', 'up', registry=registry).set(1)
    Gauge('other_metric', 'x', ['group'], registry=registry).labels('g')
    text = generate_latest(registry).decode()
    assert demo.groups_per_metric(text) == {
        'ovs_rdt_group_l3_ways': {'ovsrdt-pool-hp', 'odd "name" {x}'},
        'ovs_rdt_bytes_total': {'/'}}


def test_demo_script_help_installs_nothing(tmp_path) -> None:
    """Issue 51: ``tools/demo.sh --help`` ran tools/setup.sh (apt-get, a
    virtualenv) before printing the options.  In a tree whose setup.sh
    only leaves a mark: the options, and no mark.
    """
    import os
    import shutil
    import subprocess

    repo = os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    (tmp_path / 'tools').mkdir()
    shutil.copy(os.path.join(repo, 'tools', 'demo.sh'), tmp_path / 'tools')
    (tmp_path / 'tools' / 'setup.sh').write_text(
        'touch "$(dirname "$0")/../SETUP-RAN"; exit 1\n')
    os.symlink(os.path.join(repo, 'ovs_rdt'), tmp_path / 'ovs_rdt')
    for args in (['--help'], ['--keep', '-h']):
        res = subprocess.run(['bash', str(tmp_path / 'tools' / 'demo.sh'),
                              *args], capture_output=True, text=True,
                             timeout=60)
        assert res.returncode == 0, res.stderr
        assert res.stdout.startswith('usage: tools/demo.sh'), res.stdout
        assert 'usage: ovs-rdt demo' in res.stdout and '--keep' in res.stdout
        assert not (tmp_path / 'SETUP-RAN').exists()
    # Without --help it is the setup that runs first.
    res = subprocess.run(['bash', str(tmp_path / 'tools' / 'demo.sh')],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 1 and (tmp_path / 'SETUP-RAN').exists()
