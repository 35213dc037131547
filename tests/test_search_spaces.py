"""Every hyper-parameter worth tuning declares its search space beside its default (issue 19)."""
import dataclasses

import pytest

from topofl.config import Space, choice, floats, hp, ints
from topofl.methods import REGISTRY


def test_spaces_refuse_nonsense():
    with pytest.raises(ValueError, match="low < high"):
        floats(1.0, 0.5)
    with pytest.raises(ValueError, match="log scale"):
        floats(0.0, 1.0, log=True)
    with pytest.raises(ValueError, match="integer bounds"):
        Space("int", 0.5, 3)
    with pytest.raises(ValueError, match="two distinct"):
        choice("a", "a")
    with pytest.raises(ValueError, match="kind"):
        Space("grid", 0, 1)
    with pytest.raises(ValueError, match="outside its search space"):
        hp(5.0, "x", space=floats(0.0, 1.0))


def test_contains_and_describe():
    assert ints(1, 5).contains(3) and not ints(1, 5).contains(2.5) and not ints(1, 5).contains(True)
    assert choice(True, False).contains(False) and not choice(1, 2).contains(True)  # a bool is not the int 1
    assert floats(1e-3, 1.0, log=True).describe() == "log-uniform in [0.001, 1]"
    assert ints(1, 5).describe() == "integers, uniform in [1, 5]"
    assert choice("fo", "hf").describe() == "one of fo, hf"


@pytest.mark.parametrize("name", list(REGISTRY))
def test_every_method_declares_valid_spaces(name):
    config = REGISTRY[name].config
    fields = {f.name: f for f in dataclasses.fields(config)}
    for key in config.search_space_names():
        space = fields[key].metadata["space"]
        assert space.contains(fields[key].default), (name, key)
        # both ends of a range (and every option) are values the config accepts on their own
        values = list(space.choices) if space.kind == "choice" else [space.low, space.high]
        for v in values:
            v = int(v) if space.kind == "int" else v
            try:
                config.from_dict({key: v})
            except ValueError as exc:  # only a joint constraint with another field's default may refuse it
                assert "lr*lam" in str(exc), (name, key, v, exc)


def test_server_methods_tune_their_own_knobs_and_the_step_size():
    assert set(REGISTRY["ditto"].config.search_space()) == {"lr", "local_epochs", "lam"}
    assert set(REGISTRY["fedprox"].config.search_space()) == {"lr", "local_epochs", "mu"}
    assert set(REGISTRY["ifca"].config.search_space()) == {"lr", "local_epochs", "k"}
    assert set(REGISTRY["fedavg"].config.search_space(["lr", "batch_size"])) == {"lr", "batch_size"}  # on request
    with pytest.raises(ValueError, match="declares no search space"):
        REGISTRY["fedavg"].config.search_space(["max_update_ratio"])
    with pytest.raises(ValueError, match="unknown hyper-parameter 'nope'"):
        REGISTRY["fedavg"].config.search_space(["nope"])
