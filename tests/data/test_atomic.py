"""Tests of data/atomic.py: whole files and folders or nothing, with the modes of new ones."""

import os
import stat

import pytest

from data import atomic


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_written_file_and_directory_get_the_umask_mode(tmp_path):
    atomic.write_text(tmp_path / "a.txt", "x")
    with atomic.atomic_dir(tmp_path / "d") as d:
        (d / "inside").write_text("y")
    # the mode of a plainly created file or folder, not mkstemp's 0600 or mkdtemp's 0700
    assert _mode(tmp_path / "a.txt") == 0o666 & ~atomic._UMASK
    assert _mode(tmp_path / "d") == 0o777 & ~atomic._UMASK
    assert (tmp_path / "d" / "inside").read_text() == "y"


def test_a_failed_block_leaves_the_old_content_and_no_temporary(tmp_path):
    atomic.write_json(tmp_path / "a.json", {"v": 1})
    with atomic.atomic_dir(tmp_path / "d") as d:
        (d / "old").write_text("old")
    with pytest.raises(RuntimeError), atomic.atomic_path(tmp_path / "a.json") as tmp:
        tmp.write_text("half")
        raise RuntimeError
    with pytest.raises(RuntimeError), atomic.atomic_dir(tmp_path / "d") as d:
        (d / "new").write_text("half")
        raise RuntimeError
    assert (tmp_path / "a.json").read_text() == '{\n  "v": 1\n}\n'
    assert [p.name for p in (tmp_path / "d").iterdir()] == ["old"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "d"]


def test_a_directory_is_replaced_whole(tmp_path):
    with atomic.atomic_dir(tmp_path / "d") as d:
        (d / "old").write_text("old")
    with atomic.atomic_dir(tmp_path / "d") as d:
        (d / "new").write_text("new")
    assert [p.name for p in (tmp_path / "d").iterdir()] == ["new"]
