"""Which trace events count as communication: collectives by the names torch gives them, never compute ops that
share a word with a collective. The c10d::, _c10d_functional::, gloo: and aten:: names were read from torch 2.11 and
2.13 traces of a one-process gloo group (all_reduce, broadcast, all_gather, all_to_all_single, barrier, the functional
all_reduce) and of F.mse_loss with a broadcast target; record_param_comms and nccl:* are what NCCL runs add."""

import pytest

from accelkit.monitor.trace_analysis import analyze_trace, classify

COLLECTIVE_CPU_OPS = [
    "c10d::allreduce_", "c10d::broadcast_", "c10d::allgather_", "c10d::alltoall_base_", "c10d::barrier",
    "c10d::reduce_scatter_", "c10d::send", "c10d::recv_", "_c10d_functional::all_reduce",
    "_c10d_functional::wait_tensor", "record_param_comms", "gloo:all_reduce", "nccl:all_reduce",
]
COMPUTE_CPU_OPS = [
    "aten::broadcast_tensors", "aten::broadcast_to", "aten::mse_loss", "aten::expand", "aten::sum", "aten::mean",
    "aten::div_", "aten::addmm",
]
COLLECTIVE_KERNELS = ["ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                      "ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)", "ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)"]
COMPUTE_KERNELS = ["void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, "
                   "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >(int, ...)",
                   "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, "
                   "float, float>, unsigned int, float, 4> >(...)",
                   "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"]


def _op(name: str, cat: str = "cpu_op") -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": 0, "dur": 1}


@pytest.mark.parametrize("name", COLLECTIVE_CPU_OPS)
def test_collective_cpu_ops_are_communication(name):
    assert classify(_op(name), "cpu") == "communication"


@pytest.mark.parametrize("name", COMPUTE_CPU_OPS)
def test_broadcasting_compute_ops_are_compute(name):
    """Before, "broadcast" anywhere in the name was communication: aten::broadcast_tensors (F.mse_loss)."""
    assert classify(_op(name), "cpu") == "compute"


@pytest.mark.parametrize("name", COLLECTIVE_KERNELS)
def test_nccl_kernels_are_communication(name):
    assert classify(_op(name, "kernel"), "device") == "communication"


@pytest.mark.parametrize("name", COMPUTE_KERNELS)
def test_compute_kernels_are_compute(name):
    assert classify(_op(name, "kernel"), "device") == "compute"


def test_mse_loss_step_on_one_cpu_has_no_communication():
    """A one-process F.mse_loss step (op names and nesting as torch.profiler records them): no communication, so
    no overlap figure — it was "communication 0.1%, overlap 0.0%"."""
    trace = {"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mse_loss", "ts": 0, "dur": 40},
        {"ph": "X", "cat": "cpu_op", "name": "aten::broadcast_tensors", "ts": 2, "dur": 5},
        {"ph": "X", "cat": "cpu_op", "name": "aten::expand", "ts": 3, "dur": 2},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mean", "ts": 10, "dur": 20},
    ]}
    b = analyze_trace(trace)
    assert b["communication_s"] == 0 and b["overlap_pct"] is None
    assert b["exclusive_fraction"]["compute"] == pytest.approx(1.0)
