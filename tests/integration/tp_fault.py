"""A tensor-parallel worker that fails before it joins the group, for test_serve_tensor_parallel (a module of its own:
the spawned process imports it by name, and a light module starts fast)."""

import os


def dies_after_hello(rank, size, store_port, config, device, max_model_len, conn, parent_pid):
    """Say hello, as worker_main does once its imports are done, then fail as a worker whose device cannot be set
    would: with its error on the pipe, before joining the group."""
    conn.send(("hello",))
    conn.send(("error", f"RuntimeError: rank {rank} cannot use device {device}"))
    conn.close()
    os._exit(1)


def dies_before_hello(rank, size, store_port, config, device, max_model_len, conn, parent_pid):
    """Fail before saying anything, as a worker does whose spawn re-ran a script without the main guard."""
    raise RuntimeError("the script's top level ran again in the worker")
