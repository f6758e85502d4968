"""Model implementations for the serving engine: one decoder (``llama.py``) for every supported architecture, its
MLP (``mlp.py``) and sparse MoE MLP (``moe.py``), and the config fields that tell the architectures apart (``args.py``, no torch import,
so that ``preflight`` can read them before anything heavy loads)."""
