import logging
import os
import subprocess
import sys

from ovs_rdt.agent.counters import Counters
from ovs_rdt.agent.knobs import Placement
from ovs_rdt.agent import lock
from ovs_rdt.agent import service
from ovs_rdt.exceptions import describe


def bare_agent():
    agent = service.Agent.__new__(service.Agent)
    agent._errors = {}
    agent.counters = Counters()
    return agent


def test_one_agent_per_resctrl_root(tmp_path):
    lock_dir = str(tmp_path)
    mine = lock.AgentLock('/sys/fs/resctrl', lock_dir)
    assert mine.acquire()
    # Another process is refused while we hold it; another root is not.
    code = ('import sys; from ovs_rdt.agent import lock; '
            'sys.exit(0 if not lock.AgentLock(sys.argv[1], sys.argv[2])'
            '.acquire() else 3)')
    taken = subprocess.run([sys.executable, '-c', code, '/sys/fs/resctrl',
                            lock_dir])
    assert taken.returncode == 0
    other = subprocess.run([sys.executable, '-c', code, '/mnt/emulated',
                            lock_dir])
    assert other.returncode == 3
    assert lock.AgentLock('/sys/fs/resctrl', lock_dir).holder() == \
        str(os.getpid())
    mine.release()
    free = subprocess.run([sys.executable, '-c', code, '/sys/fs/resctrl',
                           lock_dir])
    assert free.returncode == 3


def test_running_names_the_holder_only_while_it_holds(tmp_path):
    root = '/sys/fs/resctrl'
    probe = lock.AgentLock(root, str(tmp_path))
    assert probe.running() is None              # no file
    code = ('import sys, time; from ovs_rdt.agent import lock; '
            'held = lock.AgentLock(sys.argv[1], sys.argv[2]); '
            'assert held.acquire(); print("held", flush=True); '
            'sys.stdin.readline()')
    proc = subprocess.Popen([sys.executable, '-c', code, root,
                             str(tmp_path)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == 'held\n'
        assert probe.running() == str(proc.pid)
        # A kill -9 leaves the file, with its pid, but not the lock.
        proc.kill()
        proc.wait()
        assert os.path.exists(probe.path)
        assert probe.running() is None
    finally:
        proc.kill()
        proc.wait()


def test_a_clean_exit_removes_the_lock_file(tmp_path):
    mine = lock.AgentLock('/sys/fs/resctrl', str(tmp_path))
    assert mine.acquire()
    assert os.path.exists(mine.path)
    mine.release()
    assert os.listdir(tmp_path) == []
    mine.release()                  # twice: nothing to do


def test_a_lock_file_removed_under_us_is_taken_again(tmp_path, monkeypatch):
    """The agent before us removed the file after we opened it.

    The flock we got is on a file nobody else can find: start again.
    """
    mine = lock.AgentLock('/sys/fs/resctrl', str(tmp_path))
    real = lock.fcntl.flock
    calls = []

    def flock(fd, how):
        calls.append(os.fstat(fd).st_ino)
        if len(calls) == 1:
            os.unlink(mine.path)
        real(fd, how)
    monkeypatch.setattr(lock.fcntl, 'flock', flock)
    assert mine.acquire()
    assert len(calls) == 2
    assert os.fstat(mine.fd).st_ino == os.stat(mine.path).st_ino
    mine.release()


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
    assert describe(exc) == 'No such file or directory: /x/tasks'


def test_placement_is_described_for_operators():
    text = Placement(ways=4, mb_percent=50).describe()
    assert text == ('PMD threads -> ovsrdt-ovs-pmd (4 ways, MB 50%), other '
                    'ovs-vswitchd threads -> ovsrdt-ovs-pmd')
    assert 'the default group' in Placement().describe()
