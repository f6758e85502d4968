"""`hw probe --dtype fp32,bf16,fp32` probes each dtype once: a repeated dtype was timed twice (a full probe's loops
twice as long) and the first figure silently overwritten."""

from accelkit.cli.hw import _dtypes


def test_a_repeated_dtype_is_probed_once_in_the_order_given():
    assert _dtypes("fp32,bf16,fp32") == ("fp32", "bf16")
    assert _dtypes("bf16, fp32 ,bf16") == ("bf16", "fp32")
