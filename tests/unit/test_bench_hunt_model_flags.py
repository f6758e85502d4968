"""--model with the flag it replaces (--size; diffusion's --arch/--size), both given, is one line and exit 2: `bench bert
--size large --model tiny-bert` measured tiny-bert and stored `size: large` in its config; `tune` dropped --size the
same way."""

import pytest

from tests.conftest import main_in_process


@pytest.mark.parametrize(("args", "named"), [
    (("bench", "bert", "--size", "large", "--model", "tiny-bert"), "--size large and --model tiny-bert"),
    (("bench", "resnet", "--model", "tiny-resnet", "--size=50"), "--size 50 and --model tiny-resnet"),
    (("bench", "diffusion", "--arch", "flux", "--size", "tiny", "--model", "tiny-sd3"),
     "--arch flux --size tiny and --model tiny-sd3"),
    (("tune", "bert", "--size", "base", "--model", "tiny-bert"), "--size base and --model tiny-bert"),
])
def test_model_and_the_flag_it_replaces_are_refused(capsys, args, named):
    short = ("--warmup", "0", "--min-iterations", "1", "--min-time", "0", "--no-save")  # (were it to run)
    code, out, err = main_in_process(capsys, *args, *short, *(("--max-trials", "1") if args[0] == "tune" else ()))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and named in err and "give one" in err, err


def test_either_alone_is_not_refused_by_this_check():
    from accelkit.cli.bench import refuse_shadowed

    refuse_shadowed("accelkit bench bert", {"size": "base", "model": "tiny-bert"}, lambda f: False)  # --size default
    refuse_shadowed("accelkit bench bert", {"size": "tiny", "model": None}, lambda f: True)
