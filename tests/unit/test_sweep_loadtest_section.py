"""A loadtest sweep's error names the section its value came from. Every point's LoadTestConfig is the shared
``loadtest:`` section with the served model's own fields (``workloads: {m: {…}}``) over it, and an error in either
was reported under ``workloads['m']``: `loadtest: {slo: {ttft_ms: 1.0e+400}}` said "workloads['m']: ttft_ms=inf …",
where the file has no ttft_ms. The sweep's other errors name their section the same way (``loop: …``, ``bench: …``,
``workloads['resnet'] with batch_size 2 (batch_sizes): …``)."""

from __future__ import annotations

import pytest

from accelkit.sweep.spec import load_sweep
from tests.unit.sweep_util import refusal

HEAD = "name: s\nkind: loadtest\nrates: [1]\n"
URL = "base_url: 'http://127.0.0.1:9'"


def _refusal(tmp_path, text: str) -> str:
    return refusal(tmp_path, HEAD + text)


@pytest.mark.parametrize(("text", "expected"), [
    # the reported case: YAML reads 1.0e+400 as inf, which an SLO refuses (test_spec_finite.py)
    ("workloads: {m: {}}\nloadtest: {" + URL + ", slo: {ttft_ms: 1.0e+400}}\n",
     "loadtest: ttft_ms=inf is not a finite number; expected milliseconds such as 200"),
    ("workloads: {m: {}}\nloadtest: {" + URL + ", num_promts: 2}\n",
     "loadtest: LoadTestConfig has no field num_promts; known fields: "),
    # the shared base_url is the shared section's, though every point has its own model
    ("workloads: {a: {}, b: {}}\nloadtest: {base_url: 'ftp://h'}\n", "loadtest: base_url="),
    # the served model's own field: named by it, as before
    ("workloads: {m: {slo: {ttft_ms: .inf}}}\nloadtest: {" + URL + "}\n",
     "workloads['m']: ttft_ms=inf is not a finite number; expected milliseconds such as 200"),
    ("workloads: {m: {" + URL + ", timeout_s: -1.0}}\n", "workloads['m']: timeout_s=-1.0 is out of range"),
    # a blank workload name is the workload's, not the (valid) shared section's: the shared section is checked with
    # a stand-in model, not this one's name
    ("workloads: {a: {}, '  ': {num_prompts: 5}}\nloadtest: {" + URL + "}\n", "workloads['  ']: model "),
    # the shared section's fields that the model sets itself are not the shared section's error
    ("workloads: {m: {timeout_s: -1.0}}\nloadtest: {" + URL + ", timeout_s: -1.0}\n",
     "workloads['m']: timeout_s=-1.0 is out of range"),
    # fine alone, wrong together: 100,000 prompts (the model's) at 0.01 requests/s (the section's) take 116 days
    ("workloads: {m: {num_prompts: 100000}}\nloadtest: {" + URL + ", sweep_rates: [0.01]}\n",
     "workloads['m'] with loadtest: sweep_rates[0]=0.01 spreads 100000 requests over 116 days"),
])
def test_the_error_names_the_section_its_value_came_from(tmp_path, text, expected):
    assert _refusal(tmp_path, text).startswith(expected)


def test_a_shared_value_every_model_replaces_is_not_refused(tmp_path):
    """Only what a point uses is checked: a shared field each served model sets for itself never reaches one (so the
    shared section is not checked alone first, which would refuse this file)."""
    path = tmp_path / "s.yaml"
    path.write_text(HEAD + "workloads: {a: {slo: {ttft_ms: 100}}, b: {slo: {}}}\n"
                           "loadtest: {" + URL + ", slo: {ttft_ms: .inf}}\n")
    assert load_sweep(path).loadtest["slo"] == {"ttft_ms": float("inf")}


def test_the_cli_says_it_in_one_line(cli, tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(HEAD + "workloads: {m: {}}\nloadtest: {" + URL + ", slo: {ttft_ms: 1.0e+400}}\n")
    proc = cli("sweep", str(path))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        f"error: {path}: loadtest: ttft_ms=inf is not a finite number; expected milliseconds such as 200"]
