"""What `tune` prints tells the user to do only what works: every flag a printed line names is one `tune` takes (the
"No firm winner" line said "re-run with --no-quick", which is no flag: --thorough is), and the snippet for an fp16
training winner includes the GradScaler the measured step used (printed without it, fp16 gradients underflow)."""

import ast
import re
from pathlib import Path

import torch
import typer

from accelkit.cli.app import app
from accelkit.core import Recipe
from accelkit.models import get_preset
from accelkit.models.build import build_model
from accelkit.tune.search import snippet

ROOT = Path(__file__).resolve().parents[2]
#: the modules whose strings `tune` prints: its lines, notes, reasons and errors
PRINTING = ("accelkit/cli/tune.py", "accelkit/tune/search.py", "accelkit/tune/ranking.py", "accelkit/tune/compression.py")


def _tune_flags() -> set[str]:
    command = typer.main.get_command(app).commands["tune"]
    return {flag for param in command.params for flag in (*param.opts, *param.secondary_opts)}


def test_every_flag_a_printed_line_names_is_a_tune_flag():
    flags = _tune_flags()
    assert {"--thorough", "--quick", "--memory-budget", "--max-trials"} <= flags
    named: dict[str, set[str]] = {}
    for path in PRINTING:
        for node in ast.walk(ast.parse((ROOT / path).read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", node.value):
                    named.setdefault(flag, set()).add(path)
    assert named and {flag: where for flag, where in named.items() if flag not in flags} == {}


def _run_snippet(code: str, model: torch.nn.Module) -> dict:
    namespace: dict = {"model": model}
    exec(code, namespace)
    return namespace


def test_an_fp16_training_snippet_scales_the_loss_as_the_measured_step_did():
    code = snippet(Recipe(precision="fp16"), training=True, device_type="cpu")
    namespace = _run_snippet(code, build_model(get_preset("tiny-llama"), seed=0).train())
    scaler, model = namespace["scaler"], namespace["model"]
    assert isinstance(scaler, torch.amp.GradScaler) and scaler.is_enabled()
    # the step the snippet's comment spells out, run as written
    (step,) = re.findall(r"^# each step: (.*)$", code, re.MULTILINE)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randint(4, 512, (2, 16))
    loss = model(input_ids=x, labels=x).loss
    exec(step, {"scaler": scaler, "loss": loss, "optimizer": optimizer})
    assert scaler.get_scale() > 0 and model.lm_head.weight.grad is not None
    # no scaler where none was measured: bf16 training, fp16 inference
    for other in (snippet(Recipe(precision="bf16"), training=True), snippet(Recipe(precision="fp16"))):
        assert "GradScaler" not in other and "scaler" not in other
