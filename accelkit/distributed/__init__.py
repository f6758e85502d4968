"""Multi-process and multi-node runs on engines people already operate — never a home-made launcher or
transport:

- ``launch.py``  — builds and runs the ``torch.distributed.run`` (torchrun) command line: one node
  (``--standalone``), several (static or c10d rendezvous) or elastic ``--nnodes MIN:MAX``;
- ``bench_launch.py`` — the launching side of ``accelkit bench … --nproc-per-node``: refusals, peak, torchrun;
- ``rank_results.py`` — rank 0 turns the gathered per-rank results into one bench result;
- ``process_group.py`` — this rank's process group, started so that it ends (its gloo threads joined) before the
  interpreter does;
- ``worker.py``  — the per-rank entry point torchrun starts: process group (gloo on CPU, NCCL on GPU),
  the job (a training bench or the collective probe), results gathered to rank 0 and stored once;
- ``parallel.py`` — the training step of a bench workload wrapped by DDP (ZeRO 0) or FSDP2
  ``fully_shard`` (ZeRO 2/3), and the local-shard memory accounting;
- ``grad_comm.py`` — gradient compression through torch's DDP communication hooks / FSDP2's reduce dtype, and
  the bytes of every gradient collective counted per step;
- ``quality.py`` — the quality check of a compression: K steps on a learnable synthetic task, evaluation loss;
- ``agreed_loop.py`` — the bench timing helpers with a stopping rule every rank agrees on;
- ``collectives.py`` — all-reduce / all-gather / reduce-scatter bandwidth (nccl-tests definitions);
- ``loopback.py`` — the loopback interface's name (a one-node launch's and a tensor-parallel server's gloo sockets);

Only ``launch``, ``loopback``, ``collectives`` (arithmetic) and ``quality`` (its config) import without torch. Sweeps live in ``accelkit.sweep``.
"""
