"""The soak's invariants (bench/soak_checks.py) see what breaks them."""
from __future__ import annotations

import os
import sys
from typing import Any

import pytest

from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core.model import Group, Platform

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))), 'bench'))
import soak_checks  # noqa: E402

VM = 'ovsrdt-vm-1111'
HP, NOISY = 'ovsrdt-pool-hp', 'ovsrdt-pool-noisy'
BASE = {'', HP, NOISY}


class FakeResctrl:
    """What soak_checks reads: the platform, the groups, their tasks."""

    def __init__(self, masks: dict[str, int], tasks: dict[str, set[int]]
                 ) -> None:
        self.masks, self.task_map = masks, tasks

    def platform(self, cpus: bool = False) -> Platform:
        return Platform(cbm_len=11, num_closids=16, domains=[0])

    def groups(self) -> list[Group]:
        return [Group(n, {0: CBM(m, 11)}) for n, m in self.masks.items()]

    def tasks(self, name: str) -> list[int]:
        return sorted(self.task_map.get(name, ()))


class FakeGuest:
    def __init__(self, group: str | None, ways: int | None = 2) -> None:
        self.group, self.ways = group, ways

    def __str__(self) -> str:
        return 'guest(%s)' % self.group


def good() -> tuple[dict[str, int], dict[str, set[int]]]:
    return ({'': 0x3, HP: 0x700, NOISY: 0x80, VM: 0xc},
            {HP: {1}, NOISY: set(), VM: {10, 11}})


def problems(masks: dict[str, int], tasks: dict[str, set[int]],
             guests: dict[Any, set[int]] | None = None) -> list[str]:
    if guests is None:
        guests = {FakeGuest(VM): {10, 11}}
    return soak_checks.problems(FakeResctrl(masks, tasks), guests, {1}, BASE)


def test_a_good_node_has_no_problem() -> None:
    assert problems(*good()) == []


@pytest.mark.parametrize('change, expect', [
    (lambda m, t: m.update({VM: 0x6}), 'overlaps the default group'),
    (lambda m, t: m.update({NOISY: 0x400}), 'overlaps'),
    (lambda m, t: m.update({VM: 0x5}), 'contiguous'),
    (lambda m, t: m.pop(VM), 'no group %s for a running guest' % VM),
    (lambda m, t: m.update({'ovsrdt-vm-2222': 0x30}),
     'group ovsrdt-vm-2222 of no running guest'),
    (lambda m, t: t.update({VM: {10}}), 'vCPU threads [11] not in'),
    (lambda m, t: t.update({HP: set()}), 'PMD threads [1] not in'),
    (lambda m, t: m.update({'COS1': 0x3}), "groups nobody made: ['COS1']"),
    (lambda m, t: m.update({VM: 0x8}), 'has 8, asked 2 ways'),
    (lambda m, t: m.update({VM: 0x3, '': 0x3}), 'has 3, asked 2 ways'),
    (lambda m, t: m.update({HP: 0x702}), 'overlaps the default group'),
    (lambda m, t: m.pop(NOISY), 'group %s is gone' % NOISY),
])
def test_each_broken_invariant_is_named(change: Any, expect: str) -> None:
    masks, tasks = good()
    change(masks, tasks)
    found = problems(masks, tasks)
    assert any(expect in p for p in found), found


def test_a_guest_that_asks_nothing_is_in_no_group_of_ours() -> None:
    masks, tasks = good()
    tasks[NOISY] = {20}
    found = problems(masks, tasks, {FakeGuest(VM): {10, 11},
                                    FakeGuest(None): {20}})
    assert found == ["guest(None): vCPU threads in ['%s']" % NOISY]
