"""The pasted snippet names the mode the recipe was tuned in: `apply` reads ``model.training``, and an
`accelkit tune llm-train` snippet told its reader to call model.eval() "for inference"."""

from accelkit.core import Recipe
from accelkit.tune.search import snippet


def test_a_training_snippet_says_train_and_an_inference_one_says_eval():
    recipe = Recipe(precision="bf16")
    trained = snippet(recipe, training=True)
    assert "model.train() first" in trained and "eval" not in trained and "inference" not in trained
    assert "model.eval() first" in snippet(recipe) and "inference" in snippet(recipe)


def test_a_memory_budget_that_prunes_the_baseline_says_so(capsys, probed):
    """--memory-budget 1GiB pruned fp32 (every planner estimate includes its 2 GiB framework allowance) and the
    error blamed the device: 'the fp32 baseline cannot run here'. (``probed``: the planner models a CPU from its
    stored probe.)"""
    from tests.conftest import run_cli

    del capsys
    proc = run_cli("tune", "bert", "--size", "tiny", "--device", "cpu", "--memory-budget", "1GiB",
                   "--no-save", "--no-progress")
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()[-1:]
    assert line.startswith("error: --memory-budget prunes the fp32 baseline: planner estimates ") and \
        line.endswith("MiB > budget 1024.0 MiB (the estimate includes the planner's framework allowance, 2 GiB by "
                      "default); raise --memory-budget, or drop it"), line
