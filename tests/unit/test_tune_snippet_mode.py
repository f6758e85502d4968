"""The pasted snippet names the mode the recipe was tuned in: `apply` reads ``model.training``, and an
`accelkit tune llm-train` snippet told its reader to call model.eval() "for inference"."""

from accelkit.core import Recipe
from accelkit.tune.search import snippet


def test_a_training_snippet_says_train_and_an_inference_one_says_eval():
    recipe = Recipe(precision="bf16")
    trained = snippet(recipe, training=True)
    assert "model.train() first" in trained and "eval" not in trained and "inference" not in trained
    assert "model.eval() first" in snippet(recipe) and "inference" in snippet(recipe)
