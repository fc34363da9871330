"""The policy state file: one schema for the agent and ovs-rdt status."""
from __future__ import annotations

import json
import os

import pytest

from ovs_rdt.agent.counters import Counters
from ovs_rdt.agent import policy as agent_policy
from ovs_rdt.agent.policy_state import VERSION, DomainState, LastDecision
from ovs_rdt.agent.policy_state import PolicyState, PolicyStateError
from ovs_rdt.core import policy as pol

ROOT = '/sys/fs/resctrl'


def _state(**kw) -> PolicyState:
    decision = pol.Decision(0, 8, 5, 2, 5, 'shrink', 'fits', 'it fits', 100,
                            None)
    fields = dict(
        pid=os.getpid(), time=12.5, high_priority='hp', best_effort='be',
        hp_min_ways=3, hp_max_ways=8, be_min_ways=2, budget=10, interval=1.0,
        error='resctrl is gone', mba=True, uncounted=('ovsrdt-pool-hp:1',),
        domains={0: DomainState(5, 5, 100, 4.5e6, 1e6, 2e6, 0, 0.5, 8,
                                LastDecision.of(decision)),
                 1: DomainState(8, 2)})
    fields.update(kw)
    return PolicyState(**fields)


def test_round_trip_through_json() -> None:
    state = _state()
    data = json.loads(json.dumps(state.to_dict()))
    assert data['version'] == VERSION
    assert data['domains']['0']['last']['hp'] == [8, 5]
    assert PolicyState.from_dict(data) == state


@pytest.mark.parametrize('version', [None, 0, VERSION + 1, '1'])
def test_an_unknown_version_is_refused_in_one_line(version) -> None:
    data = _state().to_dict()
    if version is None:
        del data['version']
    else:
        data['version'] = version
    with pytest.raises(PolicyStateError) as err:
        PolicyState.from_dict(data, '/run/ovs-rdt/policy-x.json')
    text = str(err.value)
    assert '\n' not in text
    assert text == ('/run/ovs-rdt/policy-x.json: version %r is not the one '
                    'this ovs-rdt reads (%d); the agent that wrote it runs '
                    'another ovs-rdt release' % (version, VERSION))


@pytest.mark.parametrize('change, word', [
    (lambda d: d.pop('budget'), 'budget'),
    (lambda d: d['domains']['0'].pop('hp_ways'), 'hp_ways'),
    (lambda d: d['domains'].update(x={'hp_ways': 1, 'be_ways': 1}), "'x'"),
    (lambda d: d.update(surprise=1), None),     # a field added: fine
])
def test_a_malformed_state_names_what_is_wrong(change, word) -> None:
    data = _state().to_dict()
    change(data)
    if word is None:
        assert PolicyState.from_dict(data).budget == 10
        return
    with pytest.raises(PolicyStateError) as err:
        PolicyState.from_dict(data, 'the file')
    assert str(err.value).startswith('the file: ') and word in str(err.value)


class _Settings:
    class resctrl:
        root = ROOT


def test_what_the_agent_writes_is_what_status_reads(tmp_path) -> None:
    """The writer (PolicyLoop._publish) and the reader (read_state) share
    the schema: every field comes back.
    """
    loop = agent_policy.PolicyLoop(lambda s: object(), Counters(),
                                   lambda: (frozenset(), None),
                                   state_dir=str(tmp_path))
    bounds = pol.Bounds('hp', 'be', 3, 8, 2, 1.0)
    loop.reader = None
    assert loop.prepare(_Settings, bounds)
    loop.policy = pol.Policy(bounds)
    decision = pol.Decision(0, 8, 5, 2, 5, 'shrink', 'fits', 'it fits')
    loop.policy.decide({})
    loop.policy.domains[0] = pol.DomainMemory()
    loop.policy.domains[0].last = decision
    loop.failure.fail('resctrl is gone')
    loop._publish({0: pol.Sample(5, 1 << 20, 4.5e6, 1e6, 2e6, 3, None)})
    state = agent_policy.read_state(ROOT, str(tmp_path))
    assert state is not None
    assert (state.high_priority, state.budget, state.error, state.mba) == \
        ('hp', 10, 'resctrl is gone', False)
    assert state.domains == {0: DomainState(
        5, 5, None, 4.5e6, 1e6, 2e6, 3, None, None,
        LastDecision('shrink', 'fits', (8, 5), (2, 5), (None, None),
                     decision.describe()))}
    # A state from another release: one line, no figures.
    path = agent_policy.state_path(ROOT, str(tmp_path))
    with open(path) as fh:
        data = json.load(fh)
    data['version'] = VERSION + 1
    with open(path, 'w') as fh:
        json.dump(data, fh)
    with pytest.raises(PolicyStateError, match='version %d is not'
                       % (VERSION + 1)):
        agent_policy.read_state(ROOT, str(tmp_path))


def test_status_shows_the_refusal_as_its_policy_line() -> None:
    from ovs_rdt.cmd.report import render_policy
    assert render_policy(None, 'f: version 2 is not ...') == \
        'Policy: f: version 2 is not ...'
