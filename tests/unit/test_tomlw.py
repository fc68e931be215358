"""The TOML value writer reads back as the same value through tomllib."""

import tomllib

import pytest

from gpuperf.files import tomlw


@pytest.mark.parametrize("v", [True, False, 0, -3, 1.5, "", 'a "quoted" \\ path\n', ["x", 1, [2.0]], {},
                               {"a": 1, "b": ["c"], "d": {"e": False}}])
def test_values_round_trip(v):
    assert tomllib.loads(f"k = {tomlw.value(v)}")["k"] == v


def test_unwritable_value_is_a_type_error():
    with pytest.raises(TypeError):
        tomlw.value(None)
