"""`plan --json` carries the context note the CLI prints on stderr (a --prompt-len past a RoPE model's context):
a script reading the JSON saw it nowhere."""

from __future__ import annotations

import json

from tests.conftest import main_in_process


def test_the_context_note_is_in_the_json_too(capsys, _isolated_home):
    code, out, err = main_in_process(capsys, "plan", "--model", "llama-3.1-8b", "--task", "infer", "--hardware",
                                     "h100", "--prompt-len", "200000", "--json")
    assert code == 0, err
    note = "--prompt-len 200000 + --output-len 128 = 200128 tokens exceeds llama-3.1-8b's context of 131072"
    assert json.loads(out)["notes"] == [note] and f"note: {note}" in err


def test_no_note_is_an_empty_list(capsys, _isolated_home):
    code, out, err = main_in_process(capsys, "plan", "--model", "llama-3.1-8b", "--task", "infer", "--hardware",
                                     "h100", "--json")
    assert code == 0 and json.loads(out)["notes"] == [], err
