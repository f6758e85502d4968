"""Per-request sampling settings (pure Python; the on-device sampler lives in ``sampler.py``).

Every field is checked here, in the caller's thread, against what the engine can run: a value the sampler
would choke on inside the engine thread (a seed ``torch.Generator.manual_seed`` refuses, a NaN or infinite
temperature) is a ``ValueError`` naming the field before the request is queued.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from accelkit.core.spec import Spec, spec_field

SEED_MIN, SEED_MAX = -(2**63), 2**64 - 1  # the range torch.Generator.manual_seed accepts
GREEDY_BELOW = 1e-5  # a temperature under this is argmax, as in vLLM: logits / 1e-40 overflow float32
MAX_STOP_STRINGS = 64  # each is searched for after every token, on the engine thread
MAX_STOP_TOKEN_IDS = 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class SamplingParams(Spec):
    """How one request picks its tokens and when it stops. ``temperature=0`` is greedy decoding."""

    temperature: float = spec_field(
        1.0, min=0.0, doc=f"Softmax temperature, finite; 0 (or anything below {GREEDY_BELOW}) = greedy (argmax)."
    )
    top_p: float = spec_field(1.0, doc="Nucleus sampling: keep the smallest set of tokens with this much mass, in (0, 1].")
    top_k: int | None = spec_field(None, min=1, doc="Keep only the k most likely tokens; None = no limit.")
    max_tokens: int = spec_field(16, min=1, doc="Most tokens to generate for this request.")
    stop: tuple[str, ...] = spec_field(
        (), doc=f"Up to {MAX_STOP_STRINGS} strings that end generation; the text is cut before them."
    )
    stop_token_ids: tuple[int, ...] = spec_field(
        (), doc=f"Up to {MAX_STOP_TOKEN_IDS} token ids that end generation (kept in the output)."
    )
    ignore_eos: bool = spec_field(False, doc="Keep generating after the end-of-sequence token.")
    seed: int | None = spec_field(
        None, min=SEED_MIN, max=SEED_MAX,
        doc="Seed of this request's own random stream, in [-2**63, 2**64 - 1]; None = the engine's stream.",
    )

    def validate(self) -> None:
        if not math.isfinite(self.temperature):
            raise ValueError(f"temperature={self.temperature!r} is not finite; expected a number >= 0 (0 = greedy)")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p={self.top_p!r} is out of range; expected 0 < top_p <= 1")
        if any(not s for s in self.stop):
            raise ValueError("stop contains an empty string; give non-empty stop strings")
        if len(self.stop) > MAX_STOP_STRINGS:
            raise ValueError(f"stop has {len(self.stop)} strings; at most {MAX_STOP_STRINGS} are allowed")
        if len(self.stop_token_ids) > MAX_STOP_TOKEN_IDS:
            raise ValueError(
                f"stop_token_ids has {len(self.stop_token_ids)} ids; at most {MAX_STOP_TOKEN_IDS} are allowed"
            )
        if any(t < 0 for t in self.stop_token_ids):
            raise ValueError(f"stop_token_ids={list(self.stop_token_ids)!r} has a negative id; token ids are >= 0")

    @property
    def is_greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW

    @classmethod
    def greedy(cls, max_tokens: int = 16, **kwargs: object) -> SamplingParams:
        """Argmax decoding — what the exactness tests compare against ``transformers.generate``."""
        return cls(temperature=0.0, max_tokens=max_tokens, **kwargs)  # type: ignore[arg-type]
