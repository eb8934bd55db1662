"""data/fingerprint.py: one version number enters every fingerprint, so raising it retrains."""

import numpy as np

from data import fingerprint as fp


def test_the_version_enters_every_fingerprint(monkeypatch):
    parts, arrays = ({"lr": 0.1}, "upstream"), (np.arange(3),)
    now = fp.fingerprint(*parts, arrays=arrays)
    assert fp.fingerprint(*parts, arrays=arrays) == now
    assert fp.fingerprint({"lr": 0.2}, "upstream", arrays=arrays) != now
    monkeypatch.setattr(fp, "FINGERPRINT_VERSION", fp.FINGERPRINT_VERSION + 1)
    assert fp.fingerprint(*parts, arrays=arrays) != now
