"""Per-request sampling settings (pure Python; the on-device sampler lives in ``sampler.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from accelkit.core.spec import Spec, spec_field


@dataclass(frozen=True, slots=True, kw_only=True)
class SamplingParams(Spec):
    """How one request picks its tokens and when it stops. ``temperature=0`` is greedy decoding."""

    temperature: float = spec_field(1.0, min=0.0, doc="Softmax temperature; 0 = greedy (argmax).")
    top_p: float = spec_field(1.0, doc="Nucleus sampling: keep the smallest set of tokens with this much mass, in (0, 1].")
    top_k: int | None = spec_field(None, min=1, doc="Keep only the k most likely tokens; None = no limit.")
    max_tokens: int = spec_field(16, min=1, doc="Most tokens to generate for this request.")
    stop: tuple[str, ...] = spec_field((), doc="Strings that end generation; the text is cut before them.")
    stop_token_ids: tuple[int, ...] = spec_field((), doc="Token ids that end generation (kept in the output).")
    ignore_eos: bool = spec_field(False, doc="Keep generating after the end-of-sequence token.")
    seed: int | None = spec_field(None, doc="Seed of this request's own random stream; None = the engine's stream.")

    def validate(self) -> None:
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p={self.top_p!r} is out of range; expected 0 < top_p <= 1")
        if any(not s for s in self.stop):
            raise ValueError("stop contains an empty string; give non-empty stop strings")

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0.0

    @classmethod
    def greedy(cls, max_tokens: int = 16, **kwargs: object) -> SamplingParams:
        """Argmax decoding — what the exactness tests compare against ``transformers.generate``."""
        return cls(temperature=0.0, max_tokens=max_tokens, **kwargs)  # type: ignore[arg-type]
