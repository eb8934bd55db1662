"""Tests of data/rawio.py: read errors that name the file, and the k-core filter."""

import gzip

import numpy as np
import pytest

from data import rawio
from tests.data.conftest import write_truncated_gzip


def test_truncated_gzip_names_the_file_and_the_last_whole_line(tmp_path):
    text = "".join(f"line {i} {i * 7919 % 10007}\n" for i in range(20000))
    path = write_truncated_gzip(tmp_path / "big.txt.gz", text, keep=0.5)
    got = []
    with pytest.raises(ValueError, match=r"big\.txt\.gz: cannot read past line \d+: .*ends early"):
        for line in rawio.read_lines(path):
            got.append(line)
    # The message counts exactly the lines delivered before the damage.
    with pytest.raises(ValueError, match=rf"past line {len(got)}:"):
        list(rawio.read_lines(path))
    assert 0 < len(got) < 20000 and got[-1] == text.splitlines(keepends=True)[len(got) - 1]


def test_corrupt_gzip_and_non_utf8_name_the_file(tmp_path):
    data = bytearray(gzip.compress(b"".join(b"row %d\n" % i for i in range(2000)), mtime=0))
    data[len(data) // 2 : len(data) // 2 + 8] = b"\xff" * 8
    (tmp_path / "bad.gz").write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"bad\.gz: cannot read past line \d+: corrupt gzip"):
        list(rawio.read_lines(tmp_path / "bad.gz"))
    (tmp_path / "latin1.txt").write_bytes("ok\ncaf\xe9\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1\.txt: cannot read past line 0: not UTF-8"):
        list(rawio.read_lines(tmp_path / "latin1.txt"))


def test_k_core_repeats_until_stable():
    user = np.array([0, 0, 1, 1, 2, 2, 3, 3])
    item = np.array([0, 1, 0, 1, 1, 9, 0, 9])
    keep, rounds = rawio.k_core(user, item, k=2)
    assert keep.all() and rounds == 1
    keep, rounds = rawio.k_core(np.array([0, 0, 1, 1, 2]), np.array([0, 1, 0, 1, 1]), k=2)
    assert keep.tolist() == [True, True, True, True, False] and rounds == 2
    keep, rounds = rawio.k_core(np.array([0, 0, 1, 1, 1]), np.array([0, 1, 1, 2, 3]), k=2)
    # Round 1 leaves item 1 only; then each user has one review left, so nothing survives.
    assert not keep.any() and rounds >= 2
