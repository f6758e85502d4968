"""The phase recorder and the image gate on tiny tensors: phases timed per call with their FLOPs, the first call
left out of the medians; the gate's verdicts on identical, close, broken and overflowed outputs."""

from __future__ import annotations

import math

import torch

from accelkit.bench.metrics import flop_counter
from accelkit.bench.workloads.diffusion.gate import IMAGE_PSNR_MIN_DB, image_gate, psnr_db
from accelkit.bench.workloads.diffusion.phases import DENOISER, OTHER, TEXT, VAE, PhaseRecorder


def _pipeline() -> tuple[PhaseRecorder, object]:
    text, denoiser, post, decoder = (torch.nn.Linear(8, 8) for _ in range(4))
    recorder = PhaseRecorder("cpu")
    recorder.add(TEXT, text)
    recorder.add(DENOISER, denoiser)
    recorder.add(VAE, post, end=decoder)  # as the VAE decode: post_quant_conv, then the decoder

    def call() -> None:
        x = torch.ones(2, 8)
        text(x)
        for _ in range(3):
            x = denoiser(x)
        decoder(post(x))

    return recorder, call


def test_phases_are_timed_per_call_and_counted_per_phase():
    recorder, call = _pipeline()
    total = recorder.count(call, flop_counter())
    per_linear = 2 * 2 * 8 * 8  # one Linear on 2 rows
    assert total == 6 * per_linear
    assert recorder.flops == {TEXT: per_linear, DENOISER: 3 * per_linear, VAE: 2 * per_linear, OTHER: 0}
    assert recorder.timed == []  # counting is not a timed call
    timed = recorder.wrap(call)
    for _ in range(4):
        timed()
    rows = {r["phase"]: r for r in recorder.summary()}
    assert len(recorder.timed) == 4  # the summary leaves the first (cold) one out of its medians
    assert rows[DENOISER]["calls"] == 3 and len(rows[DENOISER]["per_step_s"]) == 3
    assert rows[TEXT]["calls"] == 1 and rows[VAE]["calls"] == 1 and rows[OTHER]["calls"] == 0
    assert all(r["median_s"] >= 0 and r["share"] is not None for r in rows.values())
    recorder.close()
    timed()  # hooks removed: nothing is recorded any more
    assert all(not c.spans for c in recorder.timed[4:])


def test_the_gate_passes_close_outputs_and_fails_broken_or_overflowed_ones():
    g = torch.Generator().manual_seed(0)
    latents = torch.randn(2, 64, generator=g)
    image = torch.rand(2, 3 * 16 * 16, generator=g)
    reference = torch.cat([latents, image], 1)
    same = image_gate(reference, reference.clone(), 64)
    assert same.passed and same.figures["image_psnr_db"] is None and "identical" in str(same.note)
    close = reference + 1e-3 * torch.randn(reference.shape, generator=g)
    assert image_gate(reference, close, 64).passed
    broken = torch.cat([-latents, image.flip(1)], 1)
    gate = image_gate(reference, broken, 64)
    assert not gate.passed and gate.figures["latent_cosine"] < 0  # type: ignore[operator]
    overflowed = reference.clone()
    overflowed[0, 3] = math.inf
    bad = image_gate(reference, overflowed, 64)
    assert bad.passed is False and "inf/NaN" in str(bad.note)
    # PSNR is the worst image's: one bad image fails the batch
    one_off = image.clone()
    one_off[1] = 1 - one_off[1]
    assert psnr_db(image[:1], one_off[:1]) == math.inf and psnr_db(image, one_off) < IMAGE_PSNR_MIN_DB


def test_the_summary_reads_the_measured_calls_only():
    """The warm-up's calls go through the same wrapped step as the measured ones: a summary given the number of
    measured calls reads those, the last ones (it summarised 13 of 14 calls beside 5 measured: found in review)."""
    recorder, call = _pipeline()
    timed = recorder.wrap(call)
    for _ in range(9):  # the first call and the warm-up
        timed()
    for call_s in recorder.timed:
        call_s.total_s = 100.0  # slow, as a cold warm-up is: marked so the measured calls' median cannot be it
    for _ in range(5):
        timed()
    rows = {r["phase"]: r for r in recorder.summary(measured=5)}
    assert len(recorder.timed) == 14
    assert rows[OTHER]["median_s"] < 50  # the measured calls' own: none of the marked warm-up calls
    assert rows[DENOISER]["share"] is not None and rows[DENOISER]["share"] < 1


def test_the_shares_add_to_one_when_the_phases_vary_independently():
    """A share is the phase's time over the calls' time, and ``other`` the rest: each phase's median over the median
    call added to 64–86% on real runs, as the phases vary from call to call independently (found in review)."""
    from accelkit.bench.workloads.diffusion.phases import _Timed

    recorder = PhaseRecorder("cpu")
    # five calls whose phases peak in different calls: the medians of the parts are not the median of the whole
    text, steps, vae, other = [0.1, 0.9, 0.1, 0.9, 0.1], [0.2, 0.2, 1.5, 0.3, 1.4], [0.7, 0.1, 0.1, 0.8, 0.6], [0.05] * 5
    for t, d, v, o in zip(text, steps, vae, other, strict=True):
        recorder.timed.append(_Timed(t + d + v + o, {TEXT: [t], DENOISER: [d / 2, d / 2], VAE: [v]}))
    rows = {r["phase"]: r for r in recorder.summary(measured=5)}
    assert abs(sum(r["share"] for r in rows.values()) - 1) < 1e-9
    total = sum(text) + sum(steps) + sum(vae) + sum(other)
    assert abs(rows[TEXT]["share"] - sum(text) / total) < 1e-9 and abs(rows[OTHER]["share"] - 0.25 / total) < 1e-9
    assert rows[DENOISER]["median_s"] == 0.3 and rows[DENOISER]["call_median_s"] == 0.15  # the per-call medians stay
