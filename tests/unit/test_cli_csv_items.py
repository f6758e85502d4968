"""A comma list flag with an empty item is refused, naming it: `--sweep-rates 1,,2` ran rates 1 and 2, silently
dropping whatever the user meant between the commas (a typo or a lost value)."""

from __future__ import annotations

import pytest

from accelkit.cli.output import csv_list
from accelkit.core import UserError


@pytest.mark.parametrize(("value", "message"), [
    ("1,,2", "--sweep-rates '1,,2' has an empty item (item 2 of 3); give the values separated by single commas, "
             "e.g. 1,2"),
    ("1,2,", "--sweep-rates '1,2,' has an empty item (item 3 of 3); give the values separated by single commas, "
             "e.g. 1,2"),
    (",4", "--sweep-rates ',4' has an empty item (item 1 of 2); give the values separated by single commas, e.g. 4"),
    ("1, ,2", "--sweep-rates '1, ,2' has an empty item (item 2 of 3); give the values separated by single commas, "
              "e.g. 1,2"),
])
def test_an_empty_item_is_refused(value: str, message: str) -> None:
    with pytest.raises(UserError) as info:
        csv_list(value, field="--sweep-rates")
    assert str(info.value) == message


def test_items_and_no_items() -> None:
    assert csv_list(" fp32 , bf16", field="--precision", choices=("fp32", "bf16")) == ["fp32", "bf16"]
    assert csv_list("", field="--compare") == [] and csv_list(" , ", field="--compare") == []  # (the caller's words)
    assert csv_list(None, field="--compare") is None
