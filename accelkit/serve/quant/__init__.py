"""Quantized serving: the schemes read from a checkpoint's ``quantization_config`` or asked for online
(``config.py``, no torch import), the Linear layers over quantized weights (``linear.py``), and the load-time
transform that swaps them into the decoder (``load.py``)."""
