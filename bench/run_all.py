"""Run every benchmark in bench/ in turn; each prints its figures and ratio.

    python3 bench/run_all.py [NAME ...]      (e.g. allocator hook)

bench_nova_scheduler needs nova installed (``tox -e bench-nova``); it says so and
skips otherwise.
"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> int:
    names = sys.argv[1:] or sorted(
        f[len('bench_'):-3] for f in os.listdir(HERE)
        if f.startswith('bench_') and f.endswith('.py'))
    failed = []
    for name in names:
        print('== bench_%s' % name, flush=True)
        rc = subprocess.call([sys.executable,
                              os.path.join(HERE, 'bench_%s.py' % name)])
        if rc:
            failed.append(name)
        print(flush=True)
    if failed:
        print('failed: %s' % ', '.join(failed))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
