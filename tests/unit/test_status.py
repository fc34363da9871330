"""``ovs-rdt status``: what is left and whether the configuration is
applied, through ``main`` on a plain-directory resctrl tree (11 ways, 2
cache domains; tests/functional/test_operator_views.py runs it against
libvirt and the emulator).
"""
import json

import pytest

from ovs_rdt.cmd import main
from ovs_rdt.cmd import status
from ovs_rdt import conf
from ovs_rdt.core.model import Request
from ovs_rdt.manager import CacheManager
from ovs_rdt.resctrl import Resctrl
from tests.unit.fakes import FakeKernelTree, make_tree


@pytest.fixture
def node(tmp_path, monkeypatch):
    root, sysfs = tmp_path / 'resctrl', tmp_path / 'cpu'
    make_tree(str(root), sysfs=str(sysfs))
    config = tmp_path / 'ovs-rdt.conf'
    monkeypatch.setattr(status, 'vm_names',
                        lambda settings: (None, 'VM names: (a test)'))

    class Node:
        rc = FakeKernelTree(str(root), str(sysfs))

        def configure(self, pools='noisy=2', extra=''):
            pools = dict(p.split('=') for p in pools.split(',') if p)
            config.write_text(
                '[resctrl]\nroot = %s\nsysfs_cpu_root = %s\n[allocation]\n'
                'pools = %s\nsystem_min_ways = 2\n%s' % (
                    root, sysfs, ','.join(pools), extra) + ''.join(
                    '[pool:%s]\nl3_ways = %s\n' % kv for kv in pools.items()))

        def manager(self):
            return CacheManager(self.rc, conf.load(str(config)))

        def cli(self, *args):
            return main.main(['--config-file', str(config), *args])

    node = Node()
    node.configure()
    node.manager().apply()
    return node


def status_json(node, capsys):
    code = node.cli('status', '--json')
    return code, json.loads(capsys.readouterr().out)


def reserved_by_provider_config(node, capsys, whole=False):
    assert node.cli('provider-config') == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines()
                if 'reserved per domain:' in ln)
    if whole:
        return line
    counts = line.split('reserved per domain: ', 1)[1].split(' (')[0]
    return {int(d): int(n) for d, n in (
        kv.split('=') for kv in counts.rstrip('.').split())}


def test_what_is_left_for_vms_and_pools(node, capsys):
    node.manager().allocate(Request('ovsrdt-vm-a', ways={0: 3}))
    code, plan = status_json(node, capsys)
    assert code == status.EXIT_AGENT        # (no agent runs here)
    assert plan['configuration']['state'] == status.APPLIED
    by = [['system_min_ways', 2], ['ovsrdt-pool-noisy', 2]]
    assert [d['free'] for d in plan['domains']] == [
        {'vm_ways': 4, 'reserved_ways': 4, 'vm_held_ways': 3,
         'reserved_by': by, 'pool_ways': 4, 'shared_pool_ways': 4},
        {'vm_ways': 7, 'reserved_ways': 4, 'vm_held_ways': 0,
         'reserved_by': by, 'pool_ways': 7, 'shared_pool_ways': 7}]
    # the tree's 8 CLOSIDs (MB has 8 of L3's 16): the root, noisy, the VM
    assert plan['closids_free'] == 8 - 3
    assert node.cli('status') == status.EXIT_AGENT
    out = capsys.readouterr().out.splitlines()
    # What the reserve is, broken down (issue 51 trial 9), as the
    # provider config's header says it.
    assert '  free: 4 ways for a VM or an isolated pool (11 - 4 reserved ' \
        '(system_min_ways 2, ovsrdt-pool-noisy 2) - 3 held by VMs)' in out
    assert reserved_by_provider_config(node, capsys, whole=True).endswith(
        ' reserved per domain: 0=4 1=4 (each: system_min_ways 2, '
        'ovsrdt-pool-noisy 2).')


def test_resctrl_is_read_once(node, capsys, monkeypatch):
    """The table, the configuration and what is left come from one state."""
    reads = []
    groups = Resctrl.groups

    def counted(self, *args, **kwargs):
        reads.append(args or kwargs)
        return groups(self, *args, **kwargs)

    monkeypatch.setattr(Resctrl, 'groups', counted)
    assert node.cli('status', '--json') == status.EXIT_AGENT
    assert len(reads) == 1


def test_the_reserve_is_provider_configs(node, capsys):
    """A pool no longer configured: until "apply" removes it a VM start
    keeps it (only apply changes pools), so provider-config counts it, and
    so does status's count of what is left.
    """
    node.configure('noisy=2,old=3')
    node.manager().apply()
    node.configure('noisy=2')
    code, plan = status_json(node, capsys)
    assert code == status.EXIT_DIFFERS
    reserved = reserved_by_provider_config(node, capsys)
    assert reserved == {0: 7, 1: 7}
    assert {d['domain']: d['free']['reserved_ways']
            for d in plan['domains']} == reserved


def test_no_free_count_from_a_broken_system_mask(node, capsys):
    """``system_l3_cbm`` that does not parse: what is left is not counted
    (not counted with system_min_ways instead), and status says why.
    """
    node.configure(extra='system_l3_cbm = 5\n')
    code, plan = status_json(node, capsys)
    assert code == status.EXIT_INVALID
    why = plan['configuration']['error']
    assert '[allocation] system_l3_cbm' in why
    assert [d['free'] for d in plan['domains']] == [None, None]
    assert plan['free_error'] == why
    assert node.cli('status') == status.EXIT_INVALID
    out = capsys.readouterr().out
    assert 'free: ' not in out
    assert 'Free ways: not counted: %s' % why in out.splitlines()


def test_what_is_wrong_with_the_agent(tmp_path, monkeypatch):
    """Issue 51 item 1: exit 5 and what to do when no agent runs, when it
    runs an older configuration than its files, when its OvS side reports
    an error; nothing when it runs the files as they are.
    """
    import dataclasses
    import os
    import time

    from ovs_rdt.agent import agent_state
    from ovs_rdt.agent.agent_state import AgentState, outdated
    from ovs_rdt.cmd import report

    path = tmp_path / 'ovs-rdt.conf'
    path.write_text('[allocation]\npools =\n')
    settings = conf.load(str(path))
    state = AgentState(os.getpid(), [str(path)], [], settings.digests,
                       time.time(), ovs_status='ok: no rdt-* keys set')
    assert status.agent_problems('42', state, []) == []
    assert report.render_agent('42', None, state, []).splitlines() == [
        'Agent: ovs-rdt-agent runs for this resctrl root (pid 42), with the '
        'configuration files as they are', '  OvS: ok: no rdt-* keys set']
    [down] = status.agent_problems(None, None, [])
    assert down.startswith('no ovs-rdt-agent runs for this resctrl root: '
                           'nothing follows the OvS knobs (PMD threads stay '
                           'where the last agent put them')
    assert 'PMD threads are not placed' not in down
    path.write_text('[allocation]\npools = \n\n')
    bad = 'error: other_config:rdt-pmd-l3-ways: \'20\' must be from 1 to 11'
    stale = AgentState(os.getpid(), [str(path)], [], settings.digests,
                       time.time(), ovs_status=bad)
    problems = status.agent_problems('42', stale, outdated(stale))
    assert len(problems) == 2
    assert problems[0].startswith('it runs an older configuration than the '
                                  'files (%s changed; it read them at ' % path)
    assert problems[0].endswith('): apply them with %s'
                                % agent_state.reload_hint(os.getpid()))
    assert problems[1] == ('OvS knobs (Open_vSwitch external_ids:rdt-status): '
                           '%s' % bad)
    assert report.render_agent('42', None, state, problems).splitlines()[1:] \
        == ['  - ' + p for p in problems]
    # Another file set than the agent's (issue 51 trial 8): said plainly.
    [other] = status.agent_problems('42', state, [], {'/x.conf': None})
    assert other == ('it runs other files than this command read (it read '
                     '%s; this command read /x.conf): what this command says '
                     'of the configuration is of its files; give it the '
                     'agent\'s --config-file and --config-dir (or set '
                     'OVS_RDT_CONF)' % path)
    assert status.agent_problems('42', state, [], settings.digests) == []
    # A SIGHUP it rejected (issue 51 trial 4): said so, and why.
    rejected = dataclasses.replace(stale, reload_error='[pool:hp] l3_way')
    [problem, _knobs] = status.agent_problems('42', rejected,
                                              outdated(rejected))
    assert problem.endswith('): its last reload was rejected: [pool:hp] '
                            'l3_way; fix that, then reload it again: %s'
                            % agent_state.reload_hint(os.getpid()))
    # Hints fit the node: systemctl only where systemd runs.
    monkeypatch.setattr(agent_state, 'systemd', lambda: False)
    assert agent_state.reload_hint(7) == 'kill -HUP 7'
    assert 'systemctl' not in status.agent_problems(None, None, [])[0]
    monkeypatch.setattr(agent_state, 'systemd', lambda: True)
    assert agent_state.reload_hint(7) == \
        'systemctl reload ovs-rdt-agent (or kill -HUP 7)'
    assert status.agent_problems(None, None, [])[0].endswith(
        'start it: systemctl start ovs-rdt-agent')
