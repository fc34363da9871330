"""/run/ovs-rdt: made 0700, its owner and mode checked before use."""
import os
import stat

import pytest

from ovs_rdt.agent.lock import AgentLock
from ovs_rdt.exceptions import ConfigError
from ovs_rdt import runfiles


def mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_made_0700(tmp_path) -> None:
    run_dir = str(tmp_path / 'run' / 'ovs-rdt')
    assert runfiles.ensure_dir(run_dir) == run_dir
    assert mode(run_dir) == 0o700
    assert runfiles.ensure_dir(run_dir) == run_dir       # again: as it is


def test_one_left_0755_by_an_earlier_release_is_made_0700(tmp_path) -> None:
    run_dir = tmp_path / 'ovs-rdt'
    run_dir.mkdir()
    run_dir.chmod(0o755)
    runfiles.ensure_dir(str(run_dir))
    assert mode(run_dir) == 0o700


def test_a_symlink_or_a_file_is_refused(tmp_path) -> None:
    target = tmp_path / 'elsewhere'
    target.mkdir()
    link = tmp_path / 'ovs-rdt'
    link.symlink_to(target)
    with pytest.raises(ConfigError, match='%s is not a directory' % link):
        runfiles.ensure_dir(str(link))
    # The lock is not taken there either: the agent refuses to start.
    with pytest.raises(ConfigError, match='is not a directory'):
        AgentLock('/sys/fs/resctrl', str(link)).acquire()
    assert os.listdir(target) == []
    link.unlink()
    link.write_text('')
    with pytest.raises(ConfigError, match='is not a directory'):
        runfiles.ensure_dir(str(link))


@pytest.mark.skipif(os.geteuid() != 0, reason='needs root to chown')
def test_one_owned_by_another_user_is_refused(tmp_path) -> None:
    run_dir = tmp_path / 'ovs-rdt'
    run_dir.mkdir(mode=0o700)
    os.chown(run_dir, 65534, 65534)
    with pytest.raises(ConfigError, match=r'%s is owned by uid 65534, not '
                       r'by this user \(uid 0\): remove it' % run_dir):
        runfiles.ensure_dir(str(run_dir))
    assert mode(run_dir) == 0o700 and os.stat(run_dir).st_uid == 65534


def test_a_reader_who_is_not_root_is_told_so(tmp_path, monkeypatch) -> None:
    """``ovs-rdt status`` as another user: the 0700 directory hides the
    agent's lock and the policy's state; it says so instead of "no agent".
    """
    from ovs_rdt.agent import policy
    from ovs_rdt.agent.policy_state import PolicyStateError

    run_dir = str(tmp_path / 'ovs-rdt')
    mine = AgentLock('/sys/fs/resctrl', run_dir)
    assert mine.acquire()

    def denied(*args, **kwargs):
        raise PermissionError(13, 'Permission denied')
    monkeypatch.setattr(os, 'open', denied)
    with pytest.raises(ConfigError, match=r'cannot read %s/agent-\w+\.lock: '
                       r'%s is for root only \(mode 0700\): run this as root'
                       % (run_dir, run_dir)):
        AgentLock('/sys/fs/resctrl', run_dir).running()
    monkeypatch.setattr('builtins.open', denied)
    with pytest.raises(PolicyStateError, match='is for root only'):
        policy.read_state('/sys/fs/resctrl', run_dir)
    monkeypatch.undo()
    mine.release()


@pytest.mark.parametrize('perm', [0o777, 0o1777, 0o775, 0o703])
def test_one_others_could_write_to_is_refused(tmp_path, perm) -> None:
    """Owned by root but writable by others: a symlink planted there
    (``agent-<hash>.lock`` -> a file of root's) is never followed, and
    the directory is refused until it is removed.
    """
    run_dir = tmp_path / 'ovs-rdt'
    run_dir.mkdir()
    run_dir.chmod(perm)
    victim = tmp_path / 'shadow'
    victim.write_text('root:secret\n')
    lock = AgentLock('/sys/fs/resctrl', str(run_dir))
    os.symlink(victim, lock.path)
    with pytest.raises(ConfigError, match=r'%s is writable by others \(mode '
                       r'%04o\): .* remove it' % (run_dir, perm)):
        lock.acquire()
    assert victim.read_text() == 'root:secret\n'
    assert mode(run_dir) == perm


def test_the_lock_never_follows_a_symlink(tmp_path) -> None:
    run_dir = tmp_path / 'ovs-rdt'
    run_dir.mkdir(mode=0o700)
    victim = tmp_path / 'shadow'
    victim.write_text('root:secret\n')
    lock = AgentLock('/sys/fs/resctrl', str(run_dir))
    os.symlink(victim, lock.path)
    with pytest.raises(ConfigError, match='a symlink put there'):
        lock.acquire()
    assert lock.running() is None
    assert victim.read_text() == 'root:secret\n'
