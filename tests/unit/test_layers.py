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
    # (ovs_rdt.install_advice: what to install, stdlib only.)
    for path, mods in imports('ovs_rdt.emulator').items():
        core = {m for m in mods if m.split('.')[0] == 'ovs_rdt'
                and not m.startswith('ovs_rdt.emulator')
                and m != 'ovs_rdt.install_advice'}
        assert not core, (path, core)


CORE = sorted(imports('ovs_rdt.core'))


def test_the_core_holds_the_pure_modules() -> None:
    names = {os.path.basename(p) for p in CORE}
    assert {'bitmask.py', 'allocator.py', 'layout.py', 'writes.py',
            'kernel.py', 'topology.py', 'model.py', 'ways.py', 'policy.py',
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


def test_nova_is_imported_by_the_plugin_only_and_never_its_databases(
) -> None:
    """Only nova_plugin imports Nova: the filter's scheduler interface, the
    validators' extension point; never ``nova.db`` or ``nova.objects`` (the
    filter keeps no books: Placement counts).
    """
    for package in ('ovs_rdt', 'libvirt_hooks', 'nova_plugin'):
        for path, mods in imports(package).items():
            nova = {m for m in mods if m.split('.')[0] == 'nova'}
            if package != 'nova_plugin':
                assert not nova, (path, nova)
            assert not {m for m in nova if m.startswith(
                ('nova.db', 'nova.objects'))}, (path, nova)


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


def test_the_agent_imports_no_command() -> None:
    """ovs_rdt.cmd is the operator CLI, on top of the agent's layers (it
    builds the manager as the agent does: CacheManager.from_settings).
    """
    for path, mods in imports('ovs_rdt.agent').items():
        found = {m for m in mods if m.split('.')[:2] == ['ovs_rdt', 'cmd']}
        assert not found, (path, found)


#: The resctrl layer's rooms and the rooms of it each may import: each
#: below the front (``ovs_rdt.resctrl``), which composes them; the parsers
#: pure.  (``ovs_rdt.sysfs``, the CPU topology, is no part of resctrl.)
RESCTRL_ROOMS = {
    'text': set(),
    'files': set(),
    'platform': {'files', 'text'},
    'groups': {'platform', 'text'},
    'owned': {'files'},
    'monitor': {'files', 'text'},
}


@pytest.mark.parametrize('room', sorted(RESCTRL_ROOMS))
def test_each_resctrl_room_imports_only_the_rooms_below_it(room: str) -> None:
    path = os.path.join('ovs_rdt', 'resctrl', room + '.py')
    mods = imports('ovs_rdt.resctrl')[path]
    ours = {m for m in mods if m.split('.')[0] == 'ovs_rdt'}
    inside = {m.split('.')[2] for m in ours
              if m.startswith('ovs_rdt.resctrl.')}
    assert 'ovs_rdt.resctrl' not in ours, path
    assert inside <= RESCTRL_ROOMS[room], (path, inside)
    # Below every surface: pure logic, the shared names and errors only.
    others = {m for m in ours if not m.startswith(
        ('ovs_rdt.resctrl.', 'ovs_rdt.core', 'ovs_rdt.inputs'))
        and m not in ('ovs_rdt', 'ovs_rdt.exceptions')}
    assert not others, (path, others)
    if room == 'text':
        assert ours <= {'ovs_rdt.core.bitmask'}, ours


ROOMS_OF_ISSUE_49 = [os.path.join('ovs_rdt', 'resctrl', room + '.py')
                     for room in ('__init__', *RESCTRL_ROOMS)] + [
    os.path.join('ovs_rdt', 'sysfs.py'), os.path.join('ovs_rdt', 'domain_xml.py'),
    os.path.join('ovs_rdt', 'emulator', 'context.py')]


@pytest.mark.parametrize('path', ROOMS_OF_ISSUE_49)
def test_each_room_opens_with_one_line_saying_its_job(path: str) -> None:
    with open(os.path.join(REPO, path), encoding='utf-8') as fh:
        doc = ast.get_docstring(ast.parse(fh.read(), path), clean=False)
    assert doc, path
    first = doc.split('\n')[0]
    assert first.endswith('.') and len(first) > 20, (path, first)


def test_cpu_topology_is_not_resctrl() -> None:
    """``ovs_rdt.sysfs`` reads sysfs (a reader passed in), not resctrl."""
    mods = imports('ovs_rdt')[os.path.join('ovs_rdt', 'sysfs.py')]
    assert not {m for m in mods if m.startswith('ovs_rdt.resctrl')}, mods


def test_only_the_front_parsers_and_gone_are_imported_from_outside() -> None:
    """The rest of the product takes ``Resctrl`` from the front, the
    kernel's text from ``text`` and what "gone" means from ``files``.
    """
    allowed = {'ovs_rdt.resctrl', 'ovs_rdt.resctrl.text',
               'ovs_rdt.resctrl.files'}
    for package in ('ovs_rdt', 'libvirt_hooks', 'nova_plugin'):
        for path, mods in imports(package).items():
            if path.startswith(os.path.join('ovs_rdt', 'resctrl', '')):
                continue
            found = {m for m in mods if m.startswith('ovs_rdt.resctrl')}
            assert found <= allowed, (path, found - allowed)


def test_the_domain_xml_reader_is_below_the_hook_and_the_agent() -> None:
    """``ovs_rdt.domain_xml`` serves the hook, the agent's guests thread
    and ``check-domain``: it imports neither, and the agent imports nothing
    of the hook's package.
    """
    mods = imports('ovs_rdt')[os.path.join('ovs_rdt', 'domain_xml.py')]
    assert not {m for m in mods if m.startswith(
        ('libvirt_hooks', 'ovs_rdt.agent', 'ovs_rdt.cmd', 'ovs_rdt.guest'))}
    for path, mods in imports('ovs_rdt.agent').items():
        assert not {m for m in mods if m.startswith('libvirt_hooks')}, path
    assert not os.path.exists(os.path.join(REPO, 'libvirt_hooks', 'domain.py'))


#: The emulator's parts: they see the model through ``emulator.context``.
EMULATOR_PARTS = ('io_alloc.py', 'counters.py')


@pytest.mark.parametrize('part', EMULATOR_PARTS)
def test_the_emulators_parts_use_no_private_member_of_the_model(
        part: str) -> None:
    path = os.path.join(REPO, 'ovs_rdt', 'emulator', part)
    with open(path, encoding='utf-8') as fh:
        tree = ast.parse(fh.read(), path)
    private = sorted({node.attr for node in ast.walk(tree)
                      if isinstance(node, ast.Attribute)
                      and node.attr.startswith('_')
                      and not node.attr.startswith('__')
                      and not (isinstance(node.value, ast.Name)
                               and node.value.id == 'self')})
    assert private == [], (part, private)
    mods = imports('ovs_rdt.emulator')[os.path.join(
        'ovs_rdt', 'emulator', part)]
    assert 'ovs_rdt.emulator.context' in mods, part


PACKAGES = ('ovs_rdt', 'libvirt_hooks', 'nova_plugin')


def _type_checking(node: ast.AST) -> bool:
    test = getattr(node, 'test', None)
    return isinstance(node, ast.If) and (
        isinstance(test, ast.Name) and test.id == 'TYPE_CHECKING'
        or isinstance(test, ast.Attribute) and test.attr == 'TYPE_CHECKING')


def run_time_graph() -> dict[str, set[str]]:
    """module -> our modules it imports when it runs (at any depth,
    function bodies included; not ``if TYPE_CHECKING:`` blocks, which
    never run).
    """
    files: dict[str, str] = {}
    for package in PACKAGES:
        for path in imports(package):
            name = path[:-3].replace(os.sep, '.')
            files[name[:-len('.__init__')] if name.endswith('.__init__')
                  else name] = path
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        with open(os.path.join(REPO, path), encoding='utf-8') as fh:
            tree = ast.parse(fh.read(), path)
        found: set[str] = set()
        todo: list[ast.AST] = [tree]
        while todo:
            node = todo.pop()
            if _type_checking(node):
                todo.extend(getattr(node, 'orelse', []))
                continue
            todo.extend(ast.iter_child_nodes(node))
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name in files}
            elif isinstance(node, ast.ImportFrom) and node.module and \
                    not node.level:
                found |= {m for m in [node.module] + [
                    node.module + '.' + a.name for a in node.names]
                    if m in files}
        found.discard(name)
        graph[name] = found
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return out


def test_no_import_cycles() -> None:
    """No two modules import each other, directly or around a loop, in code
    that runs (agent.metrics and agent.service did, for describe()).
    """
    assert cycles(run_time_graph()) == []


def test_cycles_are_found() -> None:
    assert cycles({'a': {'b'}, 'b': {'c'}, 'c': {'a'}, 'd': {'a'}}) == [
        ['a', 'b', 'c']]


def _module_imports(path: str) -> set[str]:
    return imports('ovs_rdt')[os.path.join('ovs_rdt', path)]


def test_what_the_configuration_desires_does_no_i_o() -> None:
    """ovs_rdt.desired turns the configuration into requests: it reads
    neither resctrl nor /proc, nor applies anything; the manager does.
    """
    found = {m for m in _module_imports('desired.py') if m in (
        'ovs_rdt.resctrl', 'ovs_rdt.procfs', 'ovs_rdt.transaction',
        'ovs_rdt.manager', 'ovs_rdt.sampling', 'subprocess', 'logging')}
    assert not found, found


def test_the_transaction_applies_what_it_is_given() -> None:
    """ovs_rdt.transaction plans nothing and reads no configuration: the
    steps come from the allocator through the manager.
    """
    found = {m for m in _module_imports('transaction.py') if m in (
        'ovs_rdt.conf', 'ovs_rdt.desired', 'ovs_rdt.manager',
        'ovs_rdt.core.allocator', 'ovs_rdt.core.writes', 'logging')}
    assert not found, found


def test_every_op_of_a_plan_has_one_command_and_no_literal_names() -> None:
    """The ops are core.plan's names; the transaction has one command per
    op, and no module compares a step's op with a literal string.
    """
    from ovs_rdt.core import plan
    from ovs_rdt.transaction import COMMANDS

    ops = {plan.MKDIR, plan.RMDIR, plan.SCHEMATA, plan.MODE, plan.EVENT}
    assert set(COMMANDS) == ops
    for package in PACKAGES:
        for path in imports(package):
            with open(os.path.join(REPO, path), encoding='utf-8') as fh:
                tree = ast.parse(fh.read(), path)
            for node in ast.walk(tree):
                if not isinstance(node, ast.Compare):
                    continue
                sides = [node.left] + list(node.comparators)
                if any(isinstance(s, ast.Attribute) and s.attr == 'op'
                       and not (isinstance(s.value, ast.Name)
                                and s.value.id == 'self')
                       for s in sides):
                    literal = [s for s in sides if isinstance(s, ast.Constant)
                               and s.value in ops]
                    assert not literal, (path, node.lineno)


def test_the_hook_s_modules_log_through_the_one_seam() -> None:
    """What the hook runs logs through the ``log(level, text)`` it is
    given (ovs_rdt.logs), never ``logging`` (its import costs every
    event); ovs_rdt.logs imports it only when a record is written there.
    """
    resctrl = sorted('resctrl/' + name for name in os.listdir(
        os.path.join(REPO, 'ovs_rdt', 'resctrl')) if name.endswith('.py'))
    for path in ['manager.py', 'transaction.py', 'desired.py', 'guest.py',
                 'conf.py', 'sysfs.py', 'domain_xml.py'] + resctrl:
        assert 'logging' not in _module_imports(path), path
    with open(os.path.join(REPO, 'ovs_rdt', 'logs.py'),
              encoding='utf-8') as fh:
        top = ast.parse(fh.read()).body
    assert not [n for n in top if isinstance(n, (ast.Import, ast.ImportFrom))
                and n.module != '__future__'], 'ovs_rdt.logs imports at top'
