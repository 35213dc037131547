"""Hostile clients (topofl.robustness.attacks): each attack on a hand-checked case, the choice of
adversaries, what the server's screening lets through, and the same attacked run in process and
on Flower (in-memory grid)."""
from __future__ import annotations

import pickle
import warnings
from typing import Any

import numpy as np
import pytest

import topofl
from topofl.algorithms.fedavg import FedAvg
from topofl.data.federation import ClientData
from topofl.federation.algorithm import Algorithm, ClientContext
from topofl.federation.messages import ClientUpdate, ServerMessage
from topofl.methods import available, build_server
from topofl.models.linear import make_model
from topofl.robustness.attacks import (
    KINDS,
    AttackConfig,
    attacked,
    choose_adversaries,
    flip_labels,
    parse_attack,
)

SENT = np.array([1.0, 2.0, 3.0])
STEP = np.array([0.5, -1.0, 2.0])   # the stub's honest update θ_k − θ_sent


class Stub(Algorithm):
    """A method whose honest client returns θ_sent + STEP (and, with ``descriptor``, sends it)."""

    name = "stub"

    def __init__(self, descriptor: np.ndarray | None = None) -> None:
        super().__init__()
        self.descriptor = descriptor

    def configure_fit(self, rnd: int, selected: list[int]) -> dict[int, ServerMessage]:
        return {cid: ServerMessage(SENT) for cid in selected}

    def aggregate_fit(self, rnd: int, updates: list[ClientUpdate]) -> dict[str, Any]:
        return {}

    def message_for(self, client_id: int) -> ServerMessage:
        return ServerMessage(SENT)

    def client_fit(self, ctx: ClientContext, message: ServerMessage) -> ClientUpdate:
        return ClientUpdate(ctx.client_id, message.params + np.resize(STEP, message.params.size), ctx.data.n_train,
                            descriptor=self.descriptor)


def ctx_of(cid: int, rnd: int = 1, n: int = 12, d: int = 2, seed: int = 0) -> ClientContext:
    rng = np.random.default_rng(cid)
    X = rng.standard_normal((n, d))
    y = (X[:, 0] > 0).astype(float)
    data = ClientData(X, y, X[:4] + 1.0, 1.0 - y[:4], client_id=cid)
    return ClientContext(data, {}, make_model("binary", d), np.random.default_rng([seed, rnd, cid]), rnd, seed)


def fit(spec: str, cid: int = 0, rnd: int = 1, adversaries=(0, 1), message: ServerMessage | None = None) -> np.ndarray:
    return attacked(Stub(), spec, adversaries).client_fit(ctx_of(cid, rnd), message or ServerMessage(SENT)).params


def quiet_simulate(*args: Any, **kwargs: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return topofl.simulate(*args, **kwargs)


def losses(history: Any) -> dict[tuple[int, int], float]:
    return {(r["round"], r["client"]): r["loss"] for r in history.records}


CLEAN = {"n_clients": 4, "adversarial": ()}   # healthcare without its built-in label flips


# ---- configuration -----------------------------------------------------------------------------
@pytest.mark.parametrize("spec, words", [
    ("bogus", "kind must be one of"),
    ("sign_flip:fraction=1.0", "fraction must be in [0.0, 1.0)"),
    ("sign_flip:start_round=0", "start_round must be in [1"),
    ("sign_flip:scale=0", "scale must be in (0.0"),
    ("scaled_replacement:boost=0.5", "boost must be in [1.0"),
    ("gaussian_noise:noise_std=-1", "noise_std must be in (0.0"),
    ("label_flip:flip_rate=0", "flip_rate must be in (0.0, 1.0]"),
    ("sign_flip:noise_std=2.0", "noise_std=2.0 is not used by kind='sign_flip'"),
    ("feature_poison:feature_scale=1.0", "changes nothing"),
    ("sign_flip:colour=3", "unknown hyper-parameter(s) colour"),
    ("sign_flip:fraction", "attack takes KEY=VALUE"),
    ("", "attack must be"),
])
def test_bad_attack_is_a_value_error_naming_the_field(spec, words):
    with pytest.raises(ValueError) as exc:
        parse_attack(spec)
    assert words in str(exc.value)


def test_spec_round_trips_and_defaults_are_documented():
    a = parse_attack("scaled_replacement:fraction=0.5,start_round=3,boost=8,seed=4")
    assert a == AttackConfig("scaled_replacement", fraction=0.5, start_round=3, boost=8.0, seed=4)
    assert parse_attack(a.spec) == a and parse_attack(a) is a
    assert parse_attack("free_rider").spec == "free_rider"
    assert all(help_text for name, (_, help_text) in AttackConfig.field_help().items())


# ---- who the adversaries are ---------------------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1, 7])
def test_adversaries_are_nested_in_the_fraction_and_counted_by_floor(seed):
    ids = [3, 10, 11, 20, 21, 30, 31, 40, 41, 50]
    fractions = [0.0, 0.1, 0.2, 0.25, 0.3, 0.5, 0.7, 0.9, 0.99]
    chosen = [choose_adversaries(ids, f, seed) for f in fractions]
    for f, c in zip(fractions, chosen, strict=True):
        assert len(c) == int(np.floor(f * len(ids) + 1e-9)) and c <= set(ids)
    for lower, higher in zip(chosen, chosen[1:], strict=False):
        assert lower <= higher
    assert choose_adversaries(list(reversed(ids)), 0.5, seed) == chosen[5]   # order of the ids is irrelevant


def test_adversaries_depend_on_the_seed_and_keep_one_honest_client():
    picks = {choose_adversaries(range(10), 0.3, s) for s in range(10)}
    assert len(picks) > 1
    assert len(choose_adversaries(range(2), 0.99, 0)) == 1
    with pytest.raises(ValueError, match="distinct"):
        choose_adversaries([1, 1, 2], 0.5)
    with pytest.raises(ValueError, match="fraction must be in"):
        choose_adversaries(range(4), 1.0)


# ---- each attack, hand-checked -------------------------------------------------------------------
def test_sign_flip_scaled_replacement_and_free_rider_exactly():
    np.testing.assert_array_equal(fit("sign_flip"), [0.5, 3.0, 1.0])                 # θ − Δ
    np.testing.assert_array_equal(fit("sign_flip:scale=2"), [0.0, 4.0, -1.0])         # θ − 2Δ
    np.testing.assert_array_equal(fit("scaled_replacement:boost=4"), [3.0, -2.0, 11.0])  # θ + 4Δ
    np.testing.assert_array_equal(fit("free_rider"), SENT)


def test_honest_clients_and_rounds_before_start_are_the_methods_own():
    for spec in ("sign_flip:start_round=3", "free_rider:start_round=3", "gaussian_noise:start_round=3", "collusion:start_round=3"):
        np.testing.assert_array_equal(fit(spec, cid=0, rnd=2), SENT + STEP)    # adversary, before start_round
        np.testing.assert_array_equal(fit(spec, cid=2, rnd=5), SENT + STEP)    # honest client
        assert not np.array_equal(fit(spec, cid=0, rnd=3), SENT + STEP)         # adversary, from start_round


def test_gaussian_noise_is_independent_per_client_and_round():
    big = ServerMessage(np.full(30_000, 4.0))
    a = fit("gaussian_noise:noise_std=0.5", cid=0, message=big) - 4.0   # the noise sent as the update
    b = fit("gaussian_noise:noise_std=0.5", cid=1, message=big) - 4.0
    assert abs(np.std(a) - 0.5) < 0.01 and abs(np.mean(a)) < 0.01
    assert abs(np.corrcoef(a, b)[0, 1]) < 0.03                              # independent clients
    np.testing.assert_array_equal(a, fit("gaussian_noise:noise_std=0.5", cid=0, message=big) - 4.0)  # reproducible
    assert not np.array_equal(a, fit("gaussian_noise:noise_std=0.5", cid=0, rnd=2, message=big) - 4.0)


def test_collusion_sends_one_shared_update_that_changes_each_round():
    msg = ServerMessage(np.zeros(30_000))
    one, two = fit("collusion:noise_std=2", cid=0, message=msg), fit("collusion:noise_std=2", cid=1, message=msg)
    np.testing.assert_array_equal(one, two)
    assert abs(np.std(one) - 2.0) < 0.05 and abs(np.mean(one)) < 0.05
    assert not np.array_equal(one, fit("collusion:noise_std=2", cid=0, rnd=2, message=msg))
    assert not np.array_equal(one, fit("collusion:noise_std=2,seed=1", cid=0, message=msg))
    # colluders sent different models send the same update (up to rounding)
    np.testing.assert_allclose(fit("collusion:noise_std=2", cid=0, message=ServerMessage(SENT)) - SENT,
                               fit("collusion:noise_std=2", cid=1, message=ServerMessage(SENT + 5.0)) - SENT - 5.0, atol=1e-12)


def test_label_flip_binary_and_multiclass():
    y = np.array([0.0, 1.0, 1.0, 0.0, 1.0])
    np.testing.assert_array_equal(flip_labels(y, make_model("binary", 2), 1.0, np.random.default_rng(0)), 1.0 - y)
    y3 = np.array([0.0, 1.0, 2.0, 2.0])
    np.testing.assert_array_equal(flip_labels(y3, make_model("multiclass", 2, 3), 1.0, np.random.default_rng(0)), [2.0, 1.0, 0.0, 0.0])
    half = flip_labels(np.zeros(10), make_model("binary", 2), 0.3, np.random.default_rng(0))
    assert half.sum() == 3.0
    with pytest.raises(ValueError, match="classification"):
        flip_labels(y, make_model("regression", 2), 1.0, np.random.default_rng(0))


def test_label_flip_trains_the_adversaries_on_flipped_labels_and_evaluates_on_their_own():
    """The attacked run is, bit for bit, the clean run of a federation whose adversaries hold
    flipped training labels and their own test labels."""
    fed = topofl.make_scenario("healthcare", seed=0, **CLEAN)
    adversaries = {1, 3}
    hand_flipped = topofl.Federation(
        [ClientData(c.X_train, 1.0 - c.y_train if c.client_id in adversaries else c.y_train, c.X_test, c.y_test, c.client_id, c.meta)
         for c in fed.clients], task=fed.task, n_classes=fed.n_classes)
    history = quiet_simulate(fed, attacked(build_server("fedavg"), "label_flip", adversaries), rounds=2, seed=0)
    by_hand = quiet_simulate(hand_flipped, "fedavg", rounds=2, seed=0)
    clean = quiet_simulate(fed, "fedavg", rounds=2, seed=0)
    assert not history.failures
    assert history.records == by_hand.records   # the test metrics too: evaluated on the clients' own test labels
    np.testing.assert_array_equal(history.server_params, by_hand.server_params)
    assert history.records != clean.records


# ---- what the server sees of it ----------------------------------------------------------------
def test_feature_poison_changes_the_descriptor_of_ptopofl_adversaries_and_label_flip_does_not():
    fed = topofl.make_scenario("healthcare", seed=0, **CLEAN)
    adversaries = {0, 2}

    def phis(attack: str | None) -> dict[int, np.ndarray]:
        algo = build_server("ptopofl")
        quiet_simulate(fed, algo if attack is None else attacked(algo, attack, adversaries), rounds=1, seed=0)
        return algo.phi

    clean, flipped, poisoned = phis(None), phis("label_flip"), phis("feature_poison:feature_scale=3")
    forged, shifted = phis("descriptor_forgery:feature_scale=3"), phis("feature_poison:feature_scale=1,shift=5")
    for cid in fed.client_ids:
        np.testing.assert_array_equal(flipped[cid], clean[cid])
        np.testing.assert_array_equal(forged[cid], clean[cid])                  # the forger looks honest
        np.testing.assert_allclose(shifted[cid], clean[cid], rtol=1e-9, atol=1e-9)  # PH cannot see a shift
        if cid in adversaries:
            assert not np.allclose(poisoned[cid], clean[cid])
        else:
            np.testing.assert_array_equal(poisoned[cid], clean[cid])


def test_descriptor_forgery_sends_the_poisoned_model_with_the_honest_descriptor():
    fed = topofl.make_scenario("healthcare", seed=0, **CLEAN)
    poisoned = quiet_simulate(fed, "ptopofl", rounds=2, seed=0, attack="feature_poison:fraction=0.5")
    forged = quiet_simulate(fed, "ptopofl", rounds=2, seed=0, attack="descriptor_forgery:fraction=0.5")
    clean = quiet_simulate(fed, "ptopofl", rounds=2, seed=0)
    assert not forged.failures
    assert losses(forged) != losses(clean)   # the model was poisoned
    assert losses(forged) != losses(poisoned)  # ... but the descriptor, and so the clustering and trust, were not


def test_crude_forgery_sends_a_random_descriptor_of_the_same_norm_and_ptopofl_refuses_it():
    fed = topofl.make_scenario("healthcare", seed=0, **CLEAN)
    attack = parse_attack("crude_forgery:fraction=0.25")
    adversaries = attack.adversaries(fed.client_ids)
    h = quiet_simulate(fed, "ptopofl", rounds=2, seed=0, attack=attack)
    refused = {(f.round, f.client) for f in h.failures if f.stage == "fit"}
    assert refused == {(r, c) for r in (1, 2) for c in adversaries}, [f.reason for f in h.failures]
    assert all("descriptor" in f.reason for f in h.failures)
    # the fake itself (what an adversary's client_fit sends): non-negative, the poisoned descriptor's
    # norm, the same every round, not that descriptor; an honest client's descriptor goes through
    phi = np.arange(48, dtype=float)
    wrapped = attacked(Stub(descriptor=phi), attack, {0})
    fake, again = (wrapped.client_fit(ctx_of(0, rnd), ServerMessage(SENT)).descriptor for rnd in (1, 2))
    assert fake.shape == phi.shape and (fake >= 0).all() and not np.allclose(fake, phi)
    assert np.linalg.norm(fake) == pytest.approx(np.linalg.norm(phi), rel=1e-12)
    np.testing.assert_array_equal(fake, again)
    np.testing.assert_array_equal(wrapped.client_fit(ctx_of(1), ServerMessage(SENT)).descriptor, phi)
    # FedAvg sends no descriptor: there a crude forger is a feature poisoner
    assert losses(quiet_simulate(fed, "fedavg", rounds=2, seed=0, attack="crude_forgery:fraction=0.25")) == \
        losses(quiet_simulate(fed, "fedavg", rounds=2, seed=0, attack="feature_poison:fraction=0.25"))


@pytest.mark.parametrize("method", sorted(available("server")))
def test_every_attack_with_default_parameters_passes_the_servers_screening(method):
    """Each kind's reply is a plausible one for every method: with the default norm bound, none is refused."""
    fed = topofl.make_scenario("healthcare", seed=0, **CLEAN)
    clean = losses(quiet_simulate(fed, method, rounds=2, seed=0))
    for kind in KINDS:
        if kind == "crude_forgery" and method == "ptopofl":
            continue   # by design: its made-up descriptor is refused (test below)
        h = quiet_simulate(fed, method, rounds=2, seed=0, attack=f"{kind}:fraction=0.5")
        assert not h.failures, (kind, [f.reason for f in h.failures])
        if method != "local" or kind in ("label_flip", "feature_poison", "descriptor_forgery", "crude_forgery"):
            assert losses(h) != clean, kind   # the attack reached the run (Local sends nothing to alter)


@pytest.mark.parametrize("spec", ["scaled_replacement:boost=100", "gaussian_noise:noise_std=10", "collusion:noise_std=10"])
@pytest.mark.parametrize("method", ["fedavg", "ptopofl", "scaffold"])
def test_huge_updates_are_refused_by_the_default_norm_bound(method, spec):
    fed = topofl.make_scenario("healthcare", seed=0, **CLEAN)
    attack = parse_attack(spec + ",fraction=0.25")
    adversaries = attack.adversaries(fed.client_ids)
    h = quiet_simulate(fed, method, rounds=2, seed=0, attack=attack)
    refused = {(f.round, f.client) for f in h.failures if "update norm" in f.reason}
    assert refused == {(r, c) for r in (1, 2) for c in adversaries}


def test_ifca_free_rider_returns_the_cluster_model_it_chose():
    fed = topofl.make_scenario("healthcare", seed=0, **CLEAN)
    algo = attacked(build_server("ifca"), "free_rider:fraction=0.5", {0})
    model = algo.build_model(None, fed.task, fed.n_features, fed.n_classes)
    algo.setup(model, fed.client_ids, np.random.default_rng(0))
    message = algo.configure_fit(1, fed.client_ids)[0]
    c = fed.clients[0]
    ctx = ClientContext(c, {}, model, np.random.default_rng(0), 1, 0)
    update = algo.client_fit(ctx, message)
    rows = message.params.reshape(algo.config.k, -1)
    np.testing.assert_array_equal(update.params, rows[int(update.extras["cluster"][0])])


def test_attacks_compose():
    """A boosted label-flipped update is θ_sent + γ·(θ_flipped − θ_sent)."""
    fed = topofl.make_scenario("healthcare", seed=0, **CLEAN)
    c = fed.clients[0]
    model = make_model(fed.task, fed.n_features)
    message = ServerMessage(np.full(model.n_params, 0.1))

    def run(algo: Algorithm) -> np.ndarray:
        return algo.client_fit(ClientContext(c, {}, model, np.random.default_rng(5), 1, 0), message).params

    flipped = run(attacked(FedAvg(), "label_flip", {0}))
    both = run(attacked(attacked(FedAvg(), "label_flip", {0}), "scaled_replacement:boost=3", {0}))
    np.testing.assert_allclose(both, message.params + 3.0 * (flipped - message.params), rtol=0, atol=1e-12)
    assert not np.allclose(flipped, run(FedAvg()))


def test_wrapper_is_the_method_to_the_runtime():
    fed = topofl.make_scenario("healthcare", seed=0, **CLEAN)
    spec = "sign_flip:fraction=0.25,start_round=2"
    by_option = quiet_simulate(fed, "ptopofl", rounds=3, seed=0, attack=spec)
    attack = parse_attack(spec)
    by_hand = quiet_simulate(fed, attacked(build_server("ptopofl"), attack, attack.adversaries(fed.client_ids)), rounds=3, seed=0)
    clean = quiet_simulate(fed, "ptopofl", rounds=3, seed=0)
    assert losses(by_option) == losses(by_hand) and by_option.method == "ptopofl"
    assert {k: v for k, v in losses(by_option).items() if k[0] == 1} == {k: v for k, v in losses(clean).items() if k[0] == 1}
    assert losses(by_option) != losses(clean)
    wrapper = attacked(build_server("ptopofl"), spec, {1})
    again = pickle.loads(pickle.dumps(wrapper))
    assert again.name == "ptopofl" and again.personalised and again.adversaries == frozenset({1})
    with pytest.raises(ValueError, match="wraps a server-based topofl Algorithm"):
        attacked(object(), spec, {1})  # type: ignore[arg-type]


# ---- Flower: the same attacked run ---------------------------------------------------------------
@pytest.mark.parametrize("method, spec", [
    ("fedavg", "sign_flip:fraction=0.5,start_round=2"),
    ("ptopofl", "descriptor_forgery:fraction=0.5"),
    ("scaffold", "collusion:fraction=0.5,noise_std=0.5"),
])
def test_flower_attacked_run_equals_in_process(method, spec):
    pytest.importorskip("flwr")
    from fake_grid import FakeGrid
    from topofl.flower.server_app import federated_main
    from topofl.flower.settings import FlowerSettings, deployment_hyperparameters

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        flower = federated_main(FakeGrid(4), FlowerSettings.from_flat(method=method, rounds=3, seed=3, scenario_params=CLEAN, attack=spec))
    fed = topofl.make_scenario("healthcare", seed=3, **CLEAN)
    hp = deployment_hyperparameters(method, {})   # what a Flower run applies by default (robust-defaults)
    ref = quiet_simulate(fed, method, rounds=3, seed=3, attack=spec, **hp)
    assert not flower.failures and not ref.failures
    a, b = losses(flower), losses(ref)
    assert a.keys() == b.keys()
    np.testing.assert_allclose([a[k] for k in sorted(a)], [b[k] for k in sorted(a)], rtol=0, atol=1e-12)
    assert losses(quiet_simulate(fed, method, rounds=3, seed=3, **hp)) != b


def test_flower_settings_validate_the_attack():
    pytest.importorskip("flwr")
    from topofl.flower.settings import FlowerSettings

    assert FlowerSettings.from_run_config({"attack": "free_rider:fraction=0.25"}).node_config()["attack"] == "free_rider:fraction=0.25"
    with pytest.raises(ValueError, match="attack='sign_flip:scale=-1': scale must be in"):
        FlowerSettings.from_flat(attack="sign_flip:scale=-1")
    assert FlowerSettings.from_flat(method="sheaf", attack="sign_flip:fraction=0.5").job.attack == "sign_flip:fraction=0.5"
    with pytest.raises(ValueError, match="attack='descriptor_forgery': attack kind='descriptor_forgery' does not apply to peer"):
        FlowerSettings.from_flat(method="dfedu", attack="descriptor_forgery")
    with pytest.raises(ValueError, match="needs exchange='paper', got exchange='compact'"):
        FlowerSettings.from_flat(method="sheaf", attack="sign_flip", hyperparameters={"exchange": "compact"})
