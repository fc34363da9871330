"""A plain-directory resctrl tree for fast unit tests (no kernel rules).

Functional tests use the mounted emulator instead; this only has to look
like resctrl to the reader.
"""
from __future__ import annotations

import errno
import os
import threading

from ovs_rdt.exceptions import ResctrlError
from ovs_rdt.resctrl import Resctrl
from tests import schemata as schemata_text


def make_tree(root: str, cbm_len: int = 11, domains: tuple[int, ...] = (0, 1),
              closids: int = 16, way_bytes: int = 2621440, mba: bool = True,
              cpus_per_domain: int = 20, sysfs: str | None = None) -> None:
    full = '%x' % ((1 << cbm_len) - 1)

    def put(path: str, text: str) -> None:
        full_path = os.path.join(root, path)
        os.makedirs(os.path.dirname(full_path), exist_ok=True)
        with open(full_path, 'w') as fh:
            fh.write(text)

    put('info/last_cmd_status', 'ok\n')
    put('info/L3/cbm_mask', full + '\n')
    put('info/L3/min_cbm_bits', '1\n')
    put('info/L3/num_closids', '%d\n' % closids)
    put('info/L3/shareable_bits', '0\n')
    put('info/L3_MON/mon_features', 'llc_occupancy\nmbm_total_bytes\n')
    put('info/L3_MON/num_rmids', '176\n')
    schemata = 'L3:' + ';'.join('%d=%s' % (d, full) for d in domains) + '\n'
    if mba:
        put('info/MB/min_bandwidth', '10\n')
        put('info/MB/bandwidth_gran', '10\n')
        put('info/MB/delay_linear', '1\n')
        put('info/MB/num_closids', '%d\n' % (closids // 2))
        schemata += 'MB:' + ';'.join('%d=100' % d for d in domains) + '\n'
    put('schemata', schemata)
    sizes = ';'.join('%d=%d' % (d, way_bytes * cbm_len) for d in domains)
    put('size', 'L3:' + sizes + '\n')
    put('tasks', '1\n')
    put('mode', 'shareable\n')
    put('cpus_list', '0-%d\n' % (cpus_per_domain * len(domains) - 1))
    if sysfs:
        for dom in domains:
            for i in range(cpus_per_domain):
                cpu = dom * cpus_per_domain + i
                base = os.path.join(sysfs, 'cpu%d' % cpu, 'cache', 'index3')
                os.makedirs(base, exist_ok=True)
                with open(os.path.join(base, 'level'), 'w') as fh:
                    fh.write('3\n')
                with open(os.path.join(base, 'id'), 'w') as fh:
                    fh.write('%d\n' % dom)


class FakeKernelTree(Resctrl):
    """Plain files: mkdir fills a group, tasks moves TIDs between groups."""

    def mkdir(self, name):
        super().mkdir(name)
        for fname, text in (('schemata', self.read(self.path('', 'schemata'))),
                            ('mode', 'shareable\n'), ('tasks', ''),
                            ('cpus_list', '\n')):
            with open(self.path(name, fname), 'w') as fh:
                fh.write(text)
        if os.path.exists(self.path('', 'mba_MBps_event')):
            # mba_MBps mounts: a new group follows the kernel's default.
            with open(self.path(name, 'mba_MBps_event'), 'w') as fh:
                fh.write('mbm_local_bytes\n')

    def _resize_root(self, schemata):
        """The root's ``size`` follows its L3 masks, as the kernel's does
        (the platform's cache size is read from the two).
        """
        def l3(text):
            return schemata_text.lines(text).get('L3', {})
        try:
            with open(self.path('', 'size')) as fh:
                sizes = {d: int(v) for d, v in l3(fh.read()).items()}
            with open(self.path('', 'schemata')) as fh:
                old = {d: int(m, 16).bit_count()
                       for d, m in l3(fh.read()).items()}
            new = {d: int(m, 16).bit_count()
                   for d, m in l3(schemata).items()}
        except (OSError, ValueError):
            return
        out = {d: sizes[d] // old[d] * new.get(d, old[d])
               for d in sizes if old.get(d) and new.get(d, 1)}
        with open(self.path('', 'size'), 'w') as fh:
            fh.write('L3:%s\n' % ';'.join(
                '%d=%d' % kv for kv in sorted(out.items())))

    def rmdir(self, name):
        for fname in os.listdir(self.path(name)):
            os.unlink(self.path(name, fname))
        super().rmdir(name)

    def mkdir_as_another_tool(self, name, mask=None):
        """Another tool's group, any name: ``mask`` on every domain, else
        the mask the kernel's ``mkdir`` gives (not written yet).
        """
        from ovs_rdt.core.kernel import new_group_mask

        platform = self.platform()
        groups = self.groups()
        os.mkdir(self.path(name))
        l3 = {d: int(mask, 16) if mask else new_group_mask(
            platform, d, [(g.mode, g.l3[d].value) for g in groups])
            for d in platform.domains}
        for fname, text in (('schemata', 'L3:%s\n' % ';'.join(
                '%d=%x' % i for i in sorted(l3.items()))),
                ('mode', 'shareable\n'), ('tasks', ''), ('cpus_list', '\n')):
            with open(self.path(name, fname), 'w') as fh:
                fh.write(text)

    def rmdir_as_another_tool(self, name):
        for fname in os.listdir(self.path(name)):
            os.unlink(self.path(name, fname))
        os.rmdir(self.path(name))

    def _write_fd(self, fd, path, value):
        # (Each write to the open file: the fake file is replaced instead.)
        if path == self.path('', 'schemata'):
            self._resize_root(value)
        if os.path.basename(path) != 'tasks':
            # One atomic replace, like the kernel's: readers that do not
            # hold the lock (Resctrl.platform) never see a half-written file.
            tmp = '%s.%d.tmp' % (path, threading.get_native_id())
            with open(tmp, 'w') as fh:
                fh.write(value)
            os.replace(tmp, path)
            return
        tid = int(value)
        if not os.path.exists('/proc/%d' % tid):
            raise ResctrlError(path, value, errno.ESRCH, None, 'No such process')
        for group in self.group_names():
            tasks = self.path(group, 'tasks')
            kept = [t for t in self.tasks(group) if t != tid]
            if tasks == path:
                kept.append(tid)
            with open(tasks, 'w') as fh:
                fh.write(''.join('%d\n' % t for t in kept))
