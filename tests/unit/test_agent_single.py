import logging
import os
import subprocess
import sys

from ovs_rdt.agent.counters import Counters
from ovs_rdt.agent.knobs import Placement
from ovs_rdt.agent import service


def bare_agent():
    agent = service.Agent.__new__(service.Agent)
    agent._errors = {}
    agent.counters = Counters()
    return agent


def test_one_agent_per_resctrl_root(tmp_path):
    lock_dir = str(tmp_path)
    fd = service.single_instance('/sys/fs/resctrl', lock_dir)
    assert fd is not None
    # Another process is refused while we hold it; another root is not.
    code = ('import sys; from ovs_rdt.agent import service; '
            'sys.exit(0 if service.single_instance(sys.argv[1], sys.argv[2]) '
            'is None else 3)')
    taken = subprocess.run([sys.executable, '-c', code, '/sys/fs/resctrl',
                            lock_dir])
    assert taken.returncode == 0
    other = subprocess.run([sys.executable, '-c', code, '/mnt/emulated',
                            lock_dir])
    assert other.returncode == 3
    assert service.holder_of('/sys/fs/resctrl', lock_dir) == str(os.getpid())
    os.close(fd)
    free = subprocess.run([sys.executable, '-c', code, '/sys/fs/resctrl',
                           lock_dir])
    assert free.returncode == 3


def test_errors_are_logged_once_while_they_last_and_each_is_counted(caplog):
    agent = bare_agent()
    with caplog.at_level(logging.ERROR):
        for _ in range(50):
            agent._log_error('error: resctrl is not mounted at /x')
        agent._log_error('error: something else')
    assert len(caplog.records) == 2
    assert agent.counters.snapshot('errors') == {
        (('source', 'placement'),): 51.0}


def test_errors_of_several_sources_do_not_relog_each_other(caplog):
    """resctrl gone: placement, pools and reconciliation all fail, in turn,
    at every re-scan for hours; each is logged once.
    """
    agent = bare_agent()
    with caplog.at_level(logging.INFO):
        for _ in range(50):
            agent._log_error('error: resctrl is not mounted at /x')
            agent._log_error('cannot apply the configured pools: x', 'pools')
            agent._log_error('reconciliation failed: x', 'reconcile')
        agent._recovered('pools', 'pools applied')
        agent._recovered('pools', 'pools applied')
    assert len(caplog.records) == 4
    assert agent.counters.snapshot('errors') == {
        (('source', 'placement'),): 50.0, (('source', 'pools'),): 50.0,
        (('source', 'reconcile'),): 50.0}


def test_describe_names_the_file():
    exc = FileNotFoundError(2, 'No such file or directory', '/x/tasks')
    assert service.describe(exc) == 'No such file or directory: /x/tasks'


def test_placement_is_described_for_operators():
    text = Placement(ways=4, mb_percent=50).describe()
    assert text == ('PMD threads -> ovsrdt-ovs-pmd (4 ways, MB 50%), other '
                    'ovs-vswitchd threads -> ovsrdt-ovs-pmd')
    assert 'the default group' in Placement().describe()
