"""Groups and tasks: CLOSIDs run out, threads move, a removed group's files."""
from __future__ import annotations

import errno
import os

from ovs_rdt.selftest.geometry import Geometry
from ovs_rdt.selftest.node import Mismatch, Node, expect


def check_closids(node: Node, geo: Geometry) -> str:
    """mkdir fails with ENOSPC and 'Out of CLOSIDs' once every CLOSID has a
    group (the default group and io_alloc hold one each).
    """
    held = len(node.groups())
    free = geo.plat.num_closids - held
    made = []
    for i in range(free + 1):
        name = node.prefix + 'closid-%d' % i
        try:
            os.mkdir(node.path(name))
        except OSError as exc:
            said = node.status()
            expect(exc.errno == errno.ENOSPC and said == 'Out of CLOSIDs\n',
                   'mkdir of group %d of %d free failed with %s and %r, expected ENOSPC '
                   "and 'Out of CLOSIDs'", i + 1, free, os.strerror(exc.errno or 0), said)
            expect(not node.exists(name), 'the refused group %s exists', name)
            break
        made.append(name)
    expect(len(made) == free, '%d groups made, %d CLOSIDs of %d free (%d held)',
           len(made), free, geo.plat.num_closids, held)
    if made:
        node.rmdir(made[0])
        node.mkdir('closid-again')
    return '%d groups made with %d of %d CLOSIDs free; the next refused' % (
        len(made), free, geo.plat.num_closids)


def check_tasks(node: Node, geo: Geometry) -> str:
    """A thread written to a group's tasks is there and only there; rmdir
    gives it back; one that cannot exist is ESRCH.
    """
    one, two = node.thread(), node.thread()
    a, b = node.mkdir('tasks-a'), node.mkdir('tasks-b')
    m = node.mkmon(a, 'm')
    node.accepted(a + '/tasks', '%d\n' % one)
    expect(node.tids(a) == {one}, '%s/tasks reads %s after moving %d', a, node.tids(a), one)
    node.accepted(b + '/tasks', '%d,%d\n' % (one, two))
    expect(node.tids(b) == {one, two} and node.tids(a) == set(),
           'after moving %d,%d: %s has %s, %s has %s', one, two, b, node.tids(b), a,
           node.tids(a))
    node.refused(m + '/tasks', '%d\n' % one, errno.EINVAL,
                 "Can't move task to different control group\n"
                 'Error while processing task %d\n' % one)
    fd = os.open(node.path(a + '/tasks'), os.O_WRONLY)     # one open, one TID a write
    try:
        os.write(fd, b'%d\n' % one)
        os.write(fd, b'%d\n' % two)
    finally:
        os.close(fd)
    expect(node.tids(a) == {one, two}, 'two writes on one open moved %s', node.tids(a))
    node.accepted(m + '/tasks', '%d\n' % one)
    expect(node.tids(m) == {one} and node.tids(a) == {one, two},
           'a monitor group move: %s has %s, %s has %s', m, node.tids(m), a, node.tids(a))
    gone = no_such_tid()
    node.refused(a + '/tasks', '%d\n' % gone, errno.ESRCH,
                 'No task %d\nError while processing task %d\n' % (gone, gone))
    node.rmdir(m)
    expect(node.tids(a) == {one, two}, 'removing the monitor group lost tasks: %s',
           node.tids(a))
    node.rmdir(a)
    root = node.tids('')
    expect({one, two} <= root, 'removing %s did not give its tasks to the default group',
           a)
    node.rmdir(b)
    return 'moved, listed, refused across control groups, ESRCH for no such task, ' \
        'back to the default group on rmdir'


def no_such_tid(proc: str = '/proc') -> int:
    """A TID no task has or can have: ``pid_max`` + 1 (an exited thread's
    could be some other task's by the time it is written).
    """
    with open(os.path.join(proc, 'sys/kernel/pid_max'), encoding='ascii') as fh:
        return int(fh.read()) + 1


def check_removed_group(node: Node, geo: Geometry) -> str:
    """Files still open on a removed group fail with ENODEV."""
    a = node.mkdir('gone')
    m = node.mkmon(a, 'm')
    fds = [os.open(node.path(rel), os.O_RDWR)
           for rel in (a + '/schemata', a + '/tasks', m + '/tasks')]
    try:
        node.rmdir(a)
        for fd, rel in zip(fds, ('schemata', 'tasks', 'mon_groups/m/tasks')):
            for what, call in (('write', lambda: os.write(fd, b'0\n')),
                               ('read', lambda: os.pread(fd, 4096, 0))):
                try:
                    call()
                except OSError as exc:
                    expect(exc.errno == errno.ENODEV, '%s of a removed group\'s %s: %s, '
                           'expected ENODEV', what, rel, os.strerror(exc.errno or 0))
                    continue
                raise Mismatch("%s of a removed group's %s worked" % (what, rel))
    finally:
        for fd in fds:
            os.close(fd)
    return 'reads and writes of its open files fail with ENODEV'
