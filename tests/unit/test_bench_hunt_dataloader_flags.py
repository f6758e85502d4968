"""`bench dataloader` flags: --prefetch-factor with no worker process ran the settings once and dropped the flag
unsaid; an out-of-range count said `num_workers must be >= 0 and prefetch_factor >= 1`, naming neither the value
nor the flag."""

import pytest

from tests.conftest import main_in_process

SHORT = ("--batch-size", "2", "--image-size", "8", "--warmup", "0", "--min-iterations", "1", "--min-time", "0",
         "--no-save")


@pytest.mark.parametrize(("args", "says"), [
    (("--num-workers", "0", "--prefetch-factor", "2,4"), "--prefetch-factor 2,4 applies to worker processes, and "
                                                         "--num-workers 0 starts none"),
    (("--num-workers", "2,-1"), "--num-workers -1 is out of range; the least is 0"),
    (("--num-workers", "2", "--prefetch-factor", "4,0"), "--prefetch-factor 0 is out of range; the least is 1"),
])
def test_dataloader_flags_refused_in_one_line(capsys, args, says):
    code, out, err = main_in_process(capsys, "bench", "dataloader", *args, *SHORT)
    assert code == 2 and out == "" and err.count("\n") == 1 and says in err, err
