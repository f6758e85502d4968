"""Fault injection for the distributed failure tests: with this folder
on PYTHONPATH, the torchrun rank ACCELKIT_TEST_FAIL_RANK (default 1) of a collective probe raises, hangs,
SIGKILLs itself or aborts as a native crash does (a line on stderr, then SIGABRT) when it builds its first
collective (ACCELKIT_TEST_FAIL=raise|hang|kill|abort); with abort-at-exit any rank job runs whole and the rank
aborts as its interpreter exits (as gloo's threads could, freeing a DDP hook's state). With
ACCELKIT_TEST_FAIL=hold, every rank of a bench stops, without using the CPU, where it would build the variant named
ACCELKIT_TEST_HOLD_VARIANT — still loading it when a signal stops the launch. Other processes — pytest, the CLI,
torchrun — are left alone (they have no LOCAL_RANK)."""

import os

_mode = os.environ.get("ACCELKIT_TEST_FAIL")
if _mode == "hold" and "LOCAL_RANK" in os.environ:
    import threading

    import accelkit.distributed.parallel as parallel

    _real_train_parts = parallel.train_parts

    def _holding_train_parts(workload, variant, *args, **kwargs):  # type: ignore[no-untyped-def]
        if variant.name == os.environ["ACCELKIT_TEST_HOLD_VARIANT"]:
            threading.Event().wait()  # forever: only a signal ends this rank
        return _real_train_parts(workload, variant, *args, **kwargs)

    parallel.train_parts = _holding_train_parts  # before the worker imports it
if _mode not in (None, "hold") and "LOCAL_RANK" in os.environ and os.environ.get("RANK") == os.environ.get("ACCELKIT_TEST_FAIL_RANK", "1"):
    import signal
    import threading

    import accelkit.distributed.collectives as collectives

    def _native_abort() -> None:
        # one write, as libstdc++'s handler's fputs to unbuffered stderr: print() under `python -u` writes the text
        # and its newline separately, and a peer's line written in between took the text into that line
        os.write(2, b"terminate called without an active exception\n")
        os.abort()

    if _mode == "abort-at-exit":
        import atexit

        atexit.register(_native_abort)

    _real_op_fn = collectives._op_fn

    def _faulty_op_fn(op, size_bytes, n, device):  # type: ignore[no-untyped-def]
        if _mode == "raise":
            raise RuntimeError("injected failure in _op_fn")
        if _mode == "hang":
            threading.Event().wait()  # forever: only a signal ends this rank
        if _mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if _mode == "abort":
            _native_abort()
        return _real_op_fn(op, size_bytes, n, device)

    collectives._op_fn = _faulty_op_fn
