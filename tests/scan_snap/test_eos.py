"""The scan and the snap read from a run's distinct-token entropy (landscape/scan_snap/eos.py)."""

import numpy as np

from landscape.scan_snap import eos


def test_the_scan_is_halfway_down_and_the_snap_where_it_freezes():
    """Entropy 2 -> 0 linearly over steps 0..40, then flat at 0 (within 1% after step 40): the
    scan at step 20, the snap at step 40; a flat curve has neither; a rising one neither."""
    steps = np.arange(0, 101, 5)
    falling = np.maximum(2.0 - 0.05 * steps, 0.0)
    flat = np.full(steps.size, 1.3)
    rising = 0.01 * steps
    out = eos.entropy_phases(steps, np.stack([falling, flat, rising]))
    assert out["scan"].tolist() == [20, -1, -1]
    assert out["snap"].tolist() == [40, -1, -1]


def test_a_small_wobble_after_the_freeze_moves_the_snap_later():
    steps = np.arange(0, 101, 5)
    curve = np.maximum(2.0 - 0.05 * steps, 0.0)
    curve[steps == 70] = 0.05  # 2.5% of the drop away from the end at step 70
    out = eos.entropy_phases(steps, curve[None])
    assert out["snap"].tolist() == [75]
