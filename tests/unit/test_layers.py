"""The layers' import rules, checked from the source (doc/architecture.md)."""
from __future__ import annotations

import ast
import os

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def imports(package: str) -> dict[str, set[str]]:
    """module file -> every module it imports (at any depth)."""
    out: dict[str, set[str]] = {}
    base = os.path.join(REPO, *package.split('.'))
    for dirpath, _dirs, files in os.walk(base):
        for name in files:
            if not name.endswith('.py'):
                continue
            path = os.path.join(dirpath, name)
            with open(path, encoding='utf-8') as fh:
                tree = ast.parse(fh.read(), path)
            found = set()
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    found |= {a.name for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.module and \
                        not node.level:
                    found.add(node.module)
            out[os.path.relpath(path, REPO)] = found
    return out


def test_the_emulator_imports_nothing_of_the_core_it_emulates() -> None:
    for path, mods in imports('ovs_rdt.emulator').items():
        core = {m for m in mods if m.split('.')[0] == 'ovs_rdt'
                and not m.startswith('ovs_rdt.emulator')}
        assert not core, (path, core)


CORE = sorted(imports('ovs_rdt.core'))


def test_the_core_holds_the_pure_modules() -> None:
    names = {os.path.basename(p) for p in CORE}
    assert {'bitmask.py', 'allocator.py', 'layout.py', 'writes.py',
            'kernel.py', 'capacity.py', 'model.py', 'ways.py', 'policy.py',
            'sizing.py', 'mbm.py'} <= names


@pytest.mark.parametrize('module', CORE)
def test_pure_logic_imports_no_libvirt_ovs_or_oslo(module: str) -> None:
    mods = imports('ovs_rdt.core')[module]
    heavy = {m for m in mods if m.split('.')[0] in
             ('libvirt', 'ovs', 'ovsdbapp', 'oslo_config', 'nova', 'mfusepy',
              'subprocess', 'prometheus_client', 'socket', 'threading')}
    # Of ovs_rdt, pure logic imports only other pure logic and the
    # constants/exceptions every layer shares.
    ours = {m for m in mods if m.split('.')[0] == 'ovs_rdt'
            and not m.startswith(('ovs_rdt.core', 'ovs_rdt.inputs'))
            and m not in ('ovs_rdt', 'ovs_rdt.exceptions')}
    assert not heavy, (module, heavy)
    assert not ours, (module, ours)


def test_nova_is_imported_by_the_adapter_and_the_validators_only() -> None:
    """Nova internals live in one module, each tested inside Nova.

    nova_plugin.adapter (tests/nova/test_adapter.py); the validators use
    Nova's documented extension point (nova.api.validation.extra_specs).
    """
    allowed = {os.path.join('nova_plugin', 'adapter.py'),
               os.path.join('nova_plugin', 'validators.py')}
    for package in ('ovs_rdt', 'libvirt_hooks', 'nova_plugin'):
        for path, mods in imports(package).items():
            nova = {m for m in mods if m.split('.')[0] == 'nova'}
            assert path in allowed or not nova, (path, nova)


def test_the_filters_state_imports_neither_nova_nor_the_adapter() -> None:
    """What the filter keeps is given the adapter, not importing it.

    nova_plugin.passes, .usage, .ledger and .aggregates: unit-tested
    without Nova.
    """
    mods = imports('nova_plugin')
    for name in ('passes.py', 'usage.py', 'ledger.py', 'aggregates.py'):
        found = mods[os.path.join('nova_plugin', name)]
        assert not {m for m in found if m.split('.')[0] in ('nova', 'oslo_log')
                    or m == 'nova_plugin.adapter'}, (name, found)


def test_libvirt_python_is_imported_by_one_agent_module_only() -> None:
    """ovs_rdt.agent.virt holds every libvirt API call; the hook (which must
    never call libvirtd back), pure logic and the rest import neither it
    nor libvirt-python.
    """
    allowed = os.path.join('ovs_rdt', 'agent', 'virt.py')
    for package in ('ovs_rdt', 'libvirt_hooks', 'nova_plugin'):
        for path, mods in imports(package).items():
            found = {m for m in mods if m.split('.')[0] == 'libvirt'}
            assert path == allowed or not found, (path, found)
    for path, mods in imports('libvirt_hooks').items():
        assert not {m for m in mods if m.startswith('ovs_rdt.agent')}, path
