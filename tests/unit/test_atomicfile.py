"""ovs_rdt.atomicfile: the one way a file is replaced whole."""
from __future__ import annotations

import os
import stat

import pytest

from ovs_rdt import atomicfile


def test_replaces_whole_with_mode_and_leaves_no_temporary(tmp_path) -> None:
    path = tmp_path / 'out.yaml'
    path.write_text('old\n')
    atomicfile.write(str(path), 'new\n', 0o640)
    assert path.read_text() == 'new\n'
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    assert os.listdir(tmp_path) == ['out.yaml']


def test_a_failed_write_keeps_the_old_file_and_no_temporary(
        tmp_path, monkeypatch) -> None:
    path = tmp_path / 'out.yaml'
    path.write_text('old\n')

    def refuse(src: str, dst: str) -> None:
        raise OSError(28, 'No space left on device')
    monkeypatch.setattr(os, 'replace', refuse)
    with pytest.raises(OSError, match='No space'):
        atomicfile.write(str(path), 'new\n')
    assert path.read_text() == 'old\n'
    assert os.listdir(tmp_path) == ['out.yaml']
