"""Declarative bounds in ``hp()`` replace the hand-written range checks of the configs (issue 21)."""
import dataclasses
import math
import re

import numpy as np
import pytest

from topofl.config import Bounds, Config, TrainingConfig, floats, hp, ints
from topofl.config import choice as choice_space
from topofl.methods import REGISTRY
from topofl.privacy.dp import DPConfig
from topofl.robustness.attacks import AttackConfig


def refuses(cls, message, **values):
    """``cls(**values)`` raises ``ValueError`` with exactly ``message`` (today's wording of topofl._validation)."""
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        cls(**values)


@pytest.mark.parametrize("name", list(REGISTRY))
def test_every_registered_method_default_config_constructs(name):
    config = REGISTRY[name].config
    assert isinstance(config(), Config)
    assert config.from_dict({}) == config()


@pytest.mark.parametrize("name", list(REGISTRY))
def test_every_search_space_lies_within_the_declared_bounds(name):
    config = REGISTRY[name].config
    bounds = config.field_bounds()
    for key, space in config.search_space(config.search_space_names()).items():
        if key in bounds:
            assert bounds[key].admits(space), (name, key, space, bounds[key])


@pytest.mark.parametrize(("method", "field", "value", "message"), [
    # server-based (federated) methods
    ("fedavg", "lr", 0.0, "lr must be in (0.0, 100.0]; got 0.0"),
    ("fedavg", "trim_fraction", 0.5, "trim_fraction must be in [0.0, 0.5); got 0.5"),
    ("fedavg", "dp_delta", 1.0, "dp_delta must be in (0.0, 1.0); got 1.0"),
    ("fedprox", "mu", -0.1, "mu must be in [0.0, inf); got -0.1"),
    ("scaffold", "global_lr", 10.5, "global_lr must be in (0.0, 10.0]; got 10.5"),
    ("pfedme", "beta", 0.0, "beta must be in (0.0, 2.0]; got 0.0"),
    ("perfedavg", "delta", float("nan"), "delta must be finite; got nan"),
    ("ifca", "init_scale", float("inf"), "init_scale must be finite; got inf"),
    ("ptopofl", "beta", 1.5, "beta must be in [0.0, 1.0]; got 1.5"),
    ("ptopofl", "wasserstein_temperature", 2e6, "wasserstein_temperature must be in (0.0, 1000000.0]; got 2000000.0"),
    ("ptopofl", "tau", "high", "tau must be a number; got 'high'"),
    # decentralised (peer-to-peer) methods
    ("sheaf", "gamma", 0.0, "gamma must be in (0.0, 1.0]; got 0.0"),
    ("sheaf", "memory_budget", -1.0, "memory_budget must be in (0.0, inf); got -1.0"),
    ("dfedu", "lam", -0.5, "lam must be in [0.0, inf); got -0.5"),
    ("dpsgd", "lr", 200.0, "lr must be in (0.0, 100.0]; got 200.0"),
    ("local-peers", "l2", -1.0, "l2 must be in [0.0, inf); got -1.0"),
])
def test_declared_ranges_refuse_out_of_range_values_naming_the_field(method, field, value, message):
    refuses(REGISTRY[method].config, message, **{field: value})


@pytest.mark.parametrize(("method", "field", "value", "message"), [
    ("fedavg", "aggregator", "avg",
     "aggregator must be one of mean, median, trimmed_mean, krum, multi_krum, bulyan, norm_clip, guarded_mean; "
     "got 'avg'"),
    ("fedavg", "dp_accountant", "gdp", "dp_accountant must be one of rdp, pld; got 'gdp'"),
    ("perfedavg", "variant", "so", "variant must be one of fo, hf; got 'so'"),
    ("ptopofl", "trust_gate", "some", "trust_gate must be one of all, flagged; got 'some'"),
    ("sheaf", "exchange", "fast", "exchange must be one of paper, compact; got 'fast'"),
    ("dfedu", "model_init", "zero", "model_init must be one of independent, common; got 'zero'"),
])
def test_declared_choices_refuse_other_values(method, field, value, message):
    refuses(REGISTRY[method].config, message, **{field: value})


def test_integer_fields_refuse_bools_floats_and_out_of_range_values():
    refuses(TrainingConfig, "local_epochs must be an integer; got True", local_epochs=True)
    refuses(TrainingConfig, "local_epochs must be an integer; got 2.0", local_epochs=2.0)
    refuses(TrainingConfig, "local_epochs must be in [1, 10000]; got 0", local_epochs=0)
    refuses(REGISTRY["ptopofl"].config, "n_clusters must be in [1, inf); got 0", n_clusters=0)
    refuses(REGISTRY["pfedme"].config, "inner_steps must be in [1, 1000]; got 1001", inner_steps=1001)
    refuses(REGISTRY["fedavg"].config, "byzantine_f must be in [-1, 10000]; got -2", byzantine_f=-2)
    refuses(REGISTRY["sheaf"].config, "recompress_rank must be an integer; got False", recompress_rank=False)
    assert TrainingConfig(local_epochs=np.int64(3)).local_epochs == 3  # a NumPy integer is an integer
    # the strings of the CLI / TOML are coerced to the field's type first, then checked
    with pytest.raises(ValueError, match=re.escape("local_epochs must be in [1, 10000]; got 0")):
        TrainingConfig.from_dict({"local_epochs": "0"})
    with pytest.raises(ValueError, match=re.escape("local_epochs must be a int; got '1.5'")):
        TrainingConfig.from_dict({"local_epochs": "1.5"})


def test_a_sentinel_beside_a_range():
    ptopofl = REGISTRY["ptopofl"].config
    assert ptopofl(n_sub=0).n_sub == 0 and ptopofl(n_sub=3).n_sub == 3  # 0 = auto, else at least 3 points
    refuses(ptopofl, "n_sub must be in [3, inf); got 2", n_sub=2)
    assert ptopofl.field_bounds()["n_sub"].describe() == "an integer in [3, inf), or 0"


def test_bounds_of_other_configs_and_a_required_field():
    refuses(DPConfig, "sampling_rate must be in (0.0, 1.0]; got 0.0", sampling_rate=0.0)
    refuses(DPConfig, "accountant must be one of rdp, pld; got 'x'", accountant="x")
    refuses(AttackConfig, "fraction must be in [0.0, 1.0); got 1.0", kind="sign_flip", fraction=1.0)
    refuses(AttackConfig, "kind must be one of label_flip, feature_poison, descriptor_forgery, crude_forgery, "
                          "sign_flip, scaled_replacement, gaussian_noise, collusion, free_rider; got 'nope'",
            kind="nope")
    with pytest.raises(TypeError):  # kind has no default
        AttackConfig()


def test_rules_joining_fields_stay_in_the_subclasses():
    refuses(REGISTRY["pfedme"].config,
            "lr*lam must be below 2 for pFedMe's local update to be stable; got lr=0.1, lam=25.0", lr=0.1, lam=25.0)
    refuses(REGISTRY["fedavg"].config, "guard_max_norm must be in [3.0, inf); got 2.5",
            guard_clip=3.0, guard_max_norm=2.5)
    assert REGISTRY["fedavg"].config(guard_max_norm=math.inf).guard_max_norm == math.inf
    refuses(DPConfig, "descriptor_epsilon must be in (0.0, 1.0); got 1.5",
            descriptor_method="classic", descriptor_epsilon=1.5)
    # the bool spelling is normalised before the check
    assert REGISTRY["ptopofl"].config(augment=False).augment == "off"


def test_a_field_declared_again_keeps_the_bounds_of_its_base():
    # pFedMe and the peer methods declare lr again (another default, another search space): still (0, 100]
    for method in ("pfedme", "sheaf"):
        config = REGISTRY[method].config
        assert config.field_bounds()["lr"] == TrainingConfig.field_bounds()["lr"]
        refuses(config, "lr must be in (0.0, 100.0]; got -0.1", lr=-0.1)


def test_a_search_space_outside_the_bounds_is_refused_when_the_class_is_defined():
    message = "Probe.x: search space (uniform in [0.5, 2]) lies outside the field's bounds (in [0.0, 1.0])"
    with pytest.raises(ValueError, match=re.escape(message)):
        @dataclasses.dataclass(frozen=True)
        class Probe(Config):
            x: float = hp(0.7, "x", low=0.0, high=1.0, space=floats(0.5, 2.0))

    with pytest.raises(ValueError, match="Probe.k: search space"):
        @dataclasses.dataclass(frozen=True)
        class Probe(Config):  # noqa: F811
            k: int = hp(2, "k", low=1, high=3, integer=True, space=ints(1, 4))

    with pytest.raises(ValueError, match="Probe.mode: search space"):
        @dataclasses.dataclass(frozen=True)
        class Probe(Config):  # noqa: F811
            mode: str = hp("a", "mode", choices=("a", "b"), space=choice_space("a", "c"))

    with pytest.raises(ValueError, match="Probe.lr: search space"):  # an inherited bound is checked too
        @dataclasses.dataclass(frozen=True)
        class Probe(TrainingConfig):  # noqa: F811
            lr: float = hp(0.1, "lr", space=floats(1e-3, 200.0, log=True))

    with pytest.raises(ValueError, match=re.escape("Probe.lr: the default lies outside the field's bounds: "
                                                   "lr must be in (0.0, 100.0]; got 0.0")):
        @dataclasses.dataclass(frozen=True)
        class Probe(TrainingConfig):  # noqa: F811
            lr: float = 0.0


def test_hp_refuses_inconsistent_declarations():
    with pytest.raises(ValueError, match=re.escape("default must be in [0, 1]; got 5")):
        hp(5, "x", low=0, high=1)
    with pytest.raises(ValueError, match="either choices or a range"):
        hp("a", "x", choices=("a", "b"), low=0.0)
    with pytest.raises(ValueError, match="integer bounds are closed"):
        hp(1, "x", low=0, low_open=True, integer=True)
    with pytest.raises(ValueError, match="need the bound they open"):
        hp(1.0, "x", high_open=True)
    with pytest.raises(ValueError, match="low <= high"):
        hp(1.0, "x", low=2.0, high=0.0)
    with pytest.raises(ValueError, match="also= adds values"):
        hp(0, "x", also=(0,))


def test_bounds_are_exposed_in_field_order_and_described():
    bounds = TrainingConfig.field_bounds()
    assert list(bounds) == ["lr", "local_epochs", "batch_size", "l2", "optimizer", "momentum", "adam_beta1", "adam_beta2",
                            "adam_eps"]
    assert bounds["optimizer"].describe() == "one of sgd, sgd-momentum, adam"
    assert bounds["lr"].describe() == "in (0.0, 100.0]"
    assert bounds["local_epochs"].describe() == "an integer in [1, 10000]"
    assert DPConfig.field_bounds()["accountant"].describe() == "one of rdp, pld"
    assert Bounds(low=0.0).admits(floats(1e-3, 1.0)) and not Bounds(low=0.0, low_open=True).admits(floats(0.0, 1.0))


def test_only_known_fields_are_left_without_declared_bounds():
    """Bools, and fields whose bound is another field or is checked in a file of its own (AlgorithmConfig)."""
    allowed = {"use_trust", "recluster_on_drift", "secure_aggregation", "guard_max_norm",
               "max_update_ratio", "update_norm_floor", "max_client_weight"}
    for name, method in REGISTRY.items():
        bounds = method.config.field_bounds()
        unbounded = {f.name for f in dataclasses.fields(method.config)} - set(bounds)
        assert unbounded <= allowed, (name, unbounded - allowed)
    assert {f.name for f in dataclasses.fields(DPConfig)} - set(DPConfig.field_bounds()) == {"descriptor_epsilon"}
