"""``ovs-rdt check-domain``: what the hook would do, through ``main`` on a
plain-directory resctrl tree (tests/functional/test_operator_views.py runs
it against libvirt and the emulator).
"""
import logging

import pytest

from ovs_rdt.cmd import main
from ovs_rdt import conf
from ovs_rdt.manager import CacheManager
from tests.unit.fakes import FakeKernelTree, make_tree
from tests.unit.test_domain import UUID, rdt, xml

VM_GROUP = 'ovsrdt-vm-' + UUID


@pytest.fixture
def node(tmp_path):
    root, sysfs = tmp_path / 'resctrl', tmp_path / 'cpu'
    make_tree(str(root), sysfs=str(sysfs))
    config = tmp_path / 'ovs-rdt.conf'

    class Node:
        rc = FakeKernelTree(str(root), str(sysfs))

        def configure(self, root=root, noisy=2):
            config.write_text(
                '[resctrl]\nroot = %s\nsysfs_cpu_root = %s\nlock_timeout = 5\n'
                '[allocation]\npools = noisy\nsystem_min_ways = 2\n'
                '[pool:noisy]\nl3_ways = %d\n' % (root, sysfs, noisy))

        def apply(self):
            CacheManager(self.rc, conf.load(str(config))).apply()

        def check(self, data, capsys):
            path = tmp_path / 'domain.xml'
            path.write_bytes(data)
            code = main.main(['--config-file', str(config), 'check-domain',
                              str(path)])
            out = capsys.readouterr()
            return code, out.out, out.err

    node = Node()
    node.configure()
    return node


@pytest.fixture(autouse=True)
def core_logger():
    """The ``ovs_rdt`` logger as it was, put back after the test."""
    core = logging.getLogger('ovs_rdt')
    was = (list(core.handlers), core.level, core.propagate)
    yield core
    core.handlers[:], core.level, core.propagate = was


def test_a_dedicated_vm_and_a_refusal(node, capsys):
    code, out, _ = node.check(xml(rdt('<rdt:l3 ways="3"/>')), capsys)
    assert code == 0
    lines = out.splitlines()
    assert lines[:2] == [
        "domain 'vm1' (uuid %s) asks for 3 L3 ways (from the <rdt:rdt> "
        "annotation)" % UUID,
        'the hook would create %s and put its 2 vCPU threads and its other '
        'QEMU threads ([libvirt] include_emulator_threads = true) in it'
        % VM_GROUP]
    # pool noisy (2 ways) comes first, with the configured pools
    assert lines[2:] == ['  cache domain 0: 1c0 (3 ways, 7680 KiB)',
                         '  cache domain 1: 1c0 (3 ways, 7680 KiB)',
                         'free ways after it: cache domain 0: 4, '
                         'cache domain 1: 4']
    assert node.rc.group_names() == ['']                   # nothing written
    code, out, _ = node.check(xml(rdt('<rdt:l3 ways="8"/>')), capsys)
    assert code == 3
    assert out.startswith("domain 'vm1': the hook would refuse to start "
                          "it: ")


def test_what_is_written_and_what_is_kept(node, capsys):
    """Issue 51 trial 2 and 11: one way is "1 way"; a pool the files
    size otherwise than resctrl holds it is said to be kept (the MB value
    written: test_operator_views, this tree has no MB domains).
    """
    node.apply()
    node.configure(noisy=3)
    code, out, _ = node.check(xml(rdt('<rdt:l3 ways="1"/><rdt:mb '
                                      'percent="33"/>')), capsys)
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0].endswith('asks for 1 L3 way, memory bandwidth 33% (from '
                             'the <rdt:rdt> annotation)'), lines[0]
    assert '  cache domain 0: 100 (1 way, 2560 KiB)' in lines, lines
    assert ('  (ovsrdt-pool-noisy kept as it is (ways 0=2,1=2), though the '
            'files ask ways 0=3,1=3: pools change at "ovs-rdt apply" (with an '
            'agent running: at its reload))') in lines, lines


def test_resctrl_that_cannot_be_read_is_an_error_not_a_refusal(
        node, capsys, tmp_path):
    """Exit 1 as the help says, not 3: check-domain cannot tell."""
    node.configure(root=tmp_path / 'nowhere')
    code, out, err = node.check(xml(rdt('<rdt:l3 ways="3"/>')), capsys)
    assert (code, out) == (1, '')
    assert 'cannot open resctrl root %s' % (tmp_path / 'nowhere') in err


def test_an_empty_file_is_an_error(node, capsys, tmp_path):
    code, out, err = node.check(b'', capsys)
    assert (code, out) == (1, '')
    assert err.strip().endswith('%s is empty' % (tmp_path / 'domain.xml'))


def test_a_pool_vm_with_a_group_left_over_says_it_goes(node, capsys):
    """The hook's prepare removes the VM's dedicated group of an earlier
    definition (GuestCache.ensure); check-domain says so, as GuestCache.check
    plans it.
    """
    pool = xml(rdt('<rdt:pool name="noisy"/>'))
    node.apply()
    code, out, _ = node.check(pool, capsys)
    assert code == 0
    assert 'removes' not in out
    node.rc.mkdir(VM_GROUP)
    code, out, _ = node.check(pool, capsys)
    assert code == 0, out
    assert ('  and it removes %s, the dedicated group of an earlier '
            'definition of the VM' % VM_GROUP) in out.splitlines()
    assert sorted(node.rc.group_names()) == ['', 'ovsrdt-pool-noisy',
                                             VM_GROUP]


def test_the_cli_keeps_its_own_logging(node, capsys, core_logger):
    """The hook routes the core's records to its log; check-domain, a CLI,
    keeps its logging (--debug, standard error).
    """
    handlers = list(core_logger.handlers)
    code, _, _ = node.check(xml(rdt('<rdt:l3 ways="3"/>')), capsys)
    assert code == 0
    assert core_logger.handlers == handlers
    assert core_logger.propagate
