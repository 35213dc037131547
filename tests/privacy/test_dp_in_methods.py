"""Client-level DP inside the methods: DP-FedAvg in FedAvg/FedProx/pTopoFL's aggregation and the
Gaussian mechanism on pTopoFL's descriptors, with the accountant's ε in every round's server log."""
from __future__ import annotations

import math

import numpy as np
import pytest

from topofl import make_scenario, simulate
from topofl.algorithms.fedavg import FedAvg, GlobalModelConfig
from topofl.algorithms.fedprox import FedProxConfig
from topofl.algorithms.ptopofl import PTopoFL, PTopoFLConfig
from topofl.federation.messages import ClientUpdate
from topofl.privacy import accounting, dp

pytest.importorskip("dp_accounting")

DELTA = 1e-5
DP_KEYS = {"dp_epsilon", "dp_delta", "dp_noise_multiplier", "dp_clip", "dp_sampling_rate", "dp_clipped"}


@pytest.fixture(scope="module")
def fed():
    return make_scenario("healthcare", seed=0)


class FlatModel:
    """The smallest model the global-model server needs: ``n_params`` zeros."""

    def __init__(self, n: int) -> None:
        self.n_params = n

    def init(self, rng: np.random.Generator) -> np.ndarray:
        return np.zeros(self.n_params)


def fedavg_server(n_clients: int = 4, d: int = 50, **hp: float) -> FedAvg:
    alg = FedAvg(GlobalModelConfig(**hp))
    alg.setup(FlatModel(d), list(range(n_clients)), np.random.default_rng(np.random.SeedSequence([0, 1])))  # type: ignore[arg-type]
    return alg


# --- configuration -------------------------------------------------------------------------------

def test_dp_is_off_by_default_and_the_config_builds_a_dpconfig():
    assert GlobalModelConfig().dp is None and PTopoFLConfig().dp is None
    c = PTopoFLConfig(dp_noise_multiplier=2.0, dp_clip=0.5, dp_delta=1e-6, dp_accountant="pld", descriptor_dp_radius=3.0,
                      descriptor_dp_epsilon=4.0)
    assert c.dp == dp.DPConfig(clip=0.5, noise_multiplier=2.0, delta=1e-6, sampling_rate=1.0, accountant="pld",
                               descriptor_radius=3.0, descriptor_epsilon=4.0)
    assert GlobalModelConfig(dp_noise_multiplier=1.0).dp == dp.DPConfig(noise_multiplier=1.0)


@pytest.mark.parametrize(("config", "kwargs", "names"), [
    (GlobalModelConfig, {"dp_noise_multiplier": 1.0, "aggregator": "median"}, ("aggregator", "dp_noise_multiplier")),
    (FedProxConfig, {"dp_noise_multiplier": 1.0, "aggregator": "krum"}, ("aggregator", "dp_noise_multiplier")),
    (PTopoFLConfig, {"dp_noise_multiplier": 0.5, "intra_aggregator": "trimmed_mean"}, ("intra_aggregator", "dp_noise_multiplier")),
    (PTopoFLConfig, {"descriptor_dp_radius": 5.0, "cluster_distance": "wasserstein"}, ("cluster_distance", "descriptor_dp_radius")),
    (GlobalModelConfig, {"dp_noise_multiplier": -1.0}, ("dp_noise_multiplier",)),
    (GlobalModelConfig, {"dp_clip": 0.0}, ("dp_clip",)),
    (GlobalModelConfig, {"dp_delta": 1.0}, ("dp_delta",)),
    (GlobalModelConfig, {"dp_accountant": "moments"}, ("dp_accountant",)),
    (PTopoFLConfig, {"descriptor_dp_radius": -1.0}, ("descriptor_dp_radius",)),
    (PTopoFLConfig, {"descriptor_dp_epsilon": 0.0}, ("descriptor_dp_epsilon",)),
])
def test_invalid_dp_settings_are_refused_naming_the_fields(config, kwargs, names):
    with pytest.raises(ValueError) as err:
        config(**kwargs)
    for name in names:
        assert name in str(err.value)


def test_robust_rules_without_dp_and_mean_with_dp_are_accepted():
    assert GlobalModelConfig(aggregator="median").dp is None
    assert PTopoFLConfig(dp_noise_multiplier=1.0, intra_aggregator="mean").dp is not None
    assert PTopoFLConfig(cluster_distance="bottleneck").dp is None  # diagrams are fine without descriptor DP


# --- DP-FedAvg in FedAvg's server ----------------------------------------------------------------

@pytest.mark.parametrize("method", ["fedavg", "fedprox", "ptopofl"])
def test_every_round_logs_the_accountants_epsilon(fed, method):
    z, rounds = 1.5, 4
    h = simulate(fed, method, rounds=rounds, seed=0, dp_noise_multiplier=z, dp_clip=0.8)
    assert len(h.server_logs) == rounds
    for r, entry in enumerate(h.server_logs, start=1):
        assert DP_KEYS <= set(entry)
        assert entry["dp_epsilon"] == pytest.approx(accounting.dp_fedavg_epsilon(z, 1.0, r, DELTA), rel=1e-12)
        assert entry["dp_delta"] == DELTA and entry["dp_noise_multiplier"] == z and entry["dp_clip"] == 0.8
    eps = [e["dp_epsilon"] for e in h.server_logs]
    assert all(a < b for a, b in zip(eps, eps[1:], strict=False))  # privacy loss grows with the rounds
    assert np.isfinite(h.curve("auc")).all()


def test_runs_without_dp_log_no_privacy_entries(fed):
    for method in ("fedavg", "ptopofl"):
        h = simulate(fed, method, rounds=2, seed=0)
        assert not any(k.startswith("dp_") for e in h.server_logs for k in e)


def test_noise_std_of_the_update_is_z_c_over_the_number_of_clients():
    """Zero changes: the model moves by the noise alone, N(0, (zC/N)²) per coordinate."""
    n, d, z, c = 4, 50, 2.0, 0.7
    alg = fedavg_server(n, d, dp_noise_multiplier=z, dp_clip=c)
    steps = []
    for rnd in range(1, 201):
        before = alg.global_params.copy()
        alg.aggregate_fit(rnd, [ClientUpdate(k, before.copy(), 10) for k in range(n)])
        steps.append(alg.global_params - before)
    S = np.vstack(steps)  # 200 × 50 = 10 000 draws
    expected = z * c / n
    assert S.std() == pytest.approx(expected, rel=0.04)
    assert abs(S.mean()) < 4 * expected / math.sqrt(S.size)


def test_clipping_bounds_one_clients_influence_and_weights_are_uniform():
    """A client sending a huge change moves the model by exactly C/N plus the noise; sample sizes do not weigh.

    Two servers set up alike draw the same noise: one gets the round's updates, its twin only
    unchanged models, so the difference of their models is the clipped mean change, noise cancelled."""
    n, d, z, c = 4, 30, 1.0, 0.5
    alg, twin = (fedavg_server(n, d, dp_noise_multiplier=z, dp_clip=c) for _ in range(2))
    sent = alg.global_params.copy()
    np.testing.assert_array_equal(twin.global_params, sent)
    huge = sent.copy()
    huge[3] += 1e6
    small = sent + 0.01  # norm 0.01·√30 < C: not clipped
    updates = [ClientUpdate(0, huge, 1000), ClientUpdate(1, small, 1), ClientUpdate(2, sent.copy(), 5), ClientUpdate(3, sent.copy(), 5)]
    entry = alg.aggregate_fit(1, updates)
    assert twin.aggregate_fit(1, [ClientUpdate(k, sent.copy(), 5) for k in range(n)])["dp_clipped"] == []
    noise = n * (twin.global_params - sent)
    assert noise.std() > 0.1 * z * c  # the twin's step is the noise alone, N(0, (zC)²) on the sum
    np.testing.assert_allclose(alg.global_params - twin.global_params, (c * np.eye(d)[3] + (small - sent)) / n, rtol=0, atol=1e-12)
    assert entry["dp_clipped"] == [0]
    assert np.linalg.norm(alg.global_params - sent - noise / n - (small - sent) / n) == pytest.approx(c / n, rel=1e-9)


def test_a_round_with_no_update_is_noise_alone_and_accounted():
    alg = fedavg_server(3, 10, dp_noise_multiplier=1.0)
    sent = alg.global_params.copy()
    entry = alg.aggregate_fit(1, [])
    assert not np.array_equal(alg.global_params, sent)
    assert entry["dp_epsilon"] == pytest.approx(accounting.dp_fedavg_epsilon(1.0, 1.0, 1, DELTA), rel=1e-12) and entry["dp_clipped"] == []


def test_dp_noise_comes_from_the_server_not_from_the_run_stream(fed):
    """The noise generator is spawned from the server's seed sequence: same seed, same noise; and
    the run's own generator (selection, initialisation) is not advanced by it."""
    a = simulate(fed, "fedavg", rounds=3, seed=4, dp_noise_multiplier=1.0)
    b = simulate(fed, "fedavg", rounds=3, seed=4, dp_noise_multiplier=1.0)
    c = simulate(fed, "fedavg", rounds=3, seed=5, dp_noise_multiplier=1.0)
    np.testing.assert_array_equal(a.server_params, b.server_params)
    assert not np.array_equal(a.server_params, c.server_params)
    rng = np.random.default_rng(np.random.SeedSequence([4, 0x5E1EC7]))
    state = rng.bit_generator.state
    alg = FedAvg(GlobalModelConfig(dp_noise_multiplier=1.0))
    alg.setup(FlatModel(5), [0, 1], rng)  # type: ignore[arg-type]
    assert rng.bit_generator.state == state


# --- pTopoFL: updates per cluster -------------------------------------------------------------------

def test_ptopofl_dp_aggregates_each_cluster_with_uniform_weights(fed):
    """With negligible noise and no clipping, each cluster's raw model is its model sent plus the
    plain mean of its members' changes (not Eq. 6's weighted average). What each client was sent
    and replied is read on the wire (every client relays its honest reply unchanged)."""
    from security.attacking import run_attacked

    wire: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def relay(update, message):  # the last round's (reply, model sent) per client
        wire[update.client_id] = (update.params.copy(), message.params.copy())
        return update

    h, alg = run_attacked("ptopofl", relay, victim=set(fed.client_ids), federation=fed, rounds=3, seed=1,
                          dp_noise_multiplier=1e-12, dp_clip=1e3)
    assert not h.failures and h.server_logs[-1]["dp_clipped"] == []
    labels = h.server_logs[-1]["clusters"]
    for j in set(labels.values()):
        members = [cid for cid in wire if labels[cid] == j]
        base = wire[members[0]][1]  # the cluster's model, sent to each of its members
        assert all(np.array_equal(wire[cid][1], base) for cid in members)
        mean_change = np.mean([wire[cid][0] - wire[cid][1] for cid in members], axis=0)
        np.testing.assert_allclose(alg.cluster_raw[j], base + mean_change, rtol=0, atol=1e-8)
    _, weighted = run_attacked("ptopofl", federation=fed, rounds=3, seed=1)
    assert not np.allclose(weighted.cluster_raw[0], alg.cluster_raw[0], atol=1e-6)  # Eq. 6 differs from uniform


# --- pTopoFL: descriptor DP ----------------------------------------------------------------------------

def test_descriptor_dp_sends_the_gaussian_mechanisms_release_and_no_diagrams(fed):
    radius, eps = 40.0, 2.0
    clean, noisy = PTopoFL(PTopoFLConfig()), PTopoFL(PTopoFLConfig(descriptor_dp_radius=radius, descriptor_dp_epsilon=eps))
    simulate(fed, clean, rounds=2, seed=3)
    h = simulate(fed, noisy, rounds=2, seed=3)
    assert h.failures == []  # noisy descriptors (negative entries included) pass the server's checks
    assert noisy.dgms == {}
    sigma = dp.gaussian_sigma(math.sqrt(2) * radius, eps, DELTA)
    residuals = []
    for cid, phi in noisy.phi.items():
        assert not np.allclose(phi, clean.phi[cid])
        # exactly the mechanism with the client's private generator (its seed is the run's seed here)
        gen = np.random.default_rng(np.random.SeedSequence([3, cid, 0, 0xD9D0]))
        np.testing.assert_allclose(phi, dp.descriptor_mechanism(clean.phi[cid], radius, eps, DELTA, gen).phi, rtol=0, atol=1e-12)
        residuals.append(phi - dp.bound_descriptor(clean.phi[cid], radius))
    R = np.concatenate(residuals)  # 8 clients × 48
    assert R.std() == pytest.approx(sigma, rel=0.15)
    log = h.server_logs[-1]
    assert log["dp_descriptor_releases"] == 1 and "dp_epsilon" not in log  # updates not privatised: no finite ε claimed
    s = dp.gaussian_sigma(1.0, eps, DELTA)
    assert log["dp_epsilon_descriptor"] == pytest.approx(accounting.gaussian_epsilon(s, DELTA, 1, "rdp"), rel=1e-12)


def test_descriptor_releases_are_counted_per_fresh_descriptor(fed):
    hp = {"descriptor_dp_radius": 40.0, "descriptor_every": 2, "drift_threshold": 5.0, "dp_noise_multiplier": 1.0}
    cfg = PTopoFLConfig(**hp)
    h = simulate(fed, "ptopofl", rounds=5, seed=0, **hp)
    counts = [e["dp_descriptor_releases"] for e in h.server_logs]
    assert counts == [1, 1, 2, 2, 3]  # fresh descriptors at rounds 1, 3, 5
    last = h.server_logs[-1]
    expected = dp.privacy_report(cfg.dp, 5, 3)
    for key, value in expected.items():
        assert last[key] == pytest.approx(value, rel=1e-12)
    assert {"dp_epsilon", "dp_epsilon_descriptor", "dp_epsilon_total"} <= set(last)


@pytest.mark.parametrize("z, accepted", [(0.0, True), (1.0, False)])
def test_under_dp_the_norm_bound_judges_each_reply_alone(z, accepted):
    """Without DP a reply's bound widens with the other replies' median (large honest updates pass
    together); with DP it must not depend on the others, so the same reply is refused."""
    from topofl.federation.validation import ClientInfo, screen_updates

    d = 50
    alg = fedavg_server(4, d, dp_noise_multiplier=z)
    messages = alg.configure_fit(1, [0, 1, 2, 3])
    infos = {k: ClientInfo(k, 30, 10) for k in range(4)}

    def reply(k, norm):
        v = np.zeros(d)
        v[k] = norm
        return ClientUpdate(k, v, 30)

    # the model sent is 0, so the bound alone is 10 · max(0, floor 1) = 10; the others' median is 5 → 50
    updates = [reply(0, 20.0), reply(1, 5.0), reply(2, 5.0), reply(3, 5.0)]
    assert alg.screens_independently() is (z > 0)
    valid, rejected = screen_updates(alg, updates, messages, infos)
    assert (0 in {u.client_id for u in valid}) is accepted
    if not accepted:
        assert rejected[0][0] == 0 and "update norm 20" in rejected[0][1] and "median of the other updates 0" in rejected[0][1]
