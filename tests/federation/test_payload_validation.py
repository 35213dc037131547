"""Server-side payload validation used by every runtime before aggregation: a reply is checked
against the schema its algorithm declares (:class:`ReplySchema`), then screened as a round."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topofl.federation.messages import ClientUpdate, ServerMessage
from topofl.federation.validation import (
    ArraySpec,
    ClientInfo,
    ReplySchema,
    lower_median,
    lower_medians_of_others,
    screen_updates,
)


def update(**kw):
    base = dict(client_id=0, params=np.zeros(4), n_examples=10, descriptor=np.ones(48))
    return ClientUpdate(**{**base, **kw})


SCHEMA = ReplySchema(ArraySpec((4,)), centers=np.zeros((1, 4)), extras={"dc": ArraySpec((4,), required=False)},
                     descriptor=ArraySpec((48,), required=False), metrics={"m": (0.0, 1.0)})


def test_sound_update_passes():
    assert SCHEMA.problem(update()) is None
    assert SCHEMA.problem(update(descriptor=None)) is None
    assert SCHEMA.problem(update(extras={"dc": np.ones(4)}, metrics={"m": 0.5})) is None


@pytest.mark.parametrize("kw, words", [
    ({"params": np.zeros(5)}, "shape (4,)"),
    ({"params": np.zeros((2, 2))}, "shape (4,)"),
    ({"params": np.zeros(4, dtype=int)}, "float64"),
    ({"params": [0.0] * 4}, "numpy array"),
    ({"params": np.array([0.0, np.nan, 0.0, np.inf])}, "2 non-finite"),
    ({"params": np.full(4, 1e300)}, "sum of squares overflows"),
    ({"descriptor": np.ones(47)}, "shape (48,)"),
    ({"descriptor": np.ones((48, 1))}, "shape (48,)"),
    ({"descriptor": np.r_[np.ones(47), np.nan]}, "descriptor holds 1 non-finite"),
    ({"extras": {"dc": np.array([np.nan] * 4)}}, "extras['dc'] holds"),
    ({"extras": {"dc": np.array(["a"] * 4)}}, "float64"),
    ({"extras": {"other": np.ones(4)}}, "unexpected extras 'other'"),
    ({"metrics": {"m": 2.0}}, "metric 'm' must be in [0, 1]"),
    ({"metrics": {"m": float("nan")}}, "metric 'm'"),
    ({"metrics": {"x": 0.1}}, "unexpected metric 'x'"),
])
def test_unsound_update_is_named(kw, words):
    reason = SCHEMA.problem(update(**kw))
    assert reason is not None and words in reason, reason


def test_array_spec_ranges_and_integers():
    spec = ArraySpec((None,), low=0, high=3, integer=True)
    assert spec.problem("a", np.array([0.0, 3.0])) is None
    assert "must be in [0, 3]" in spec.problem("a", np.array([4.0]))
    assert "must hold integers" in spec.problem("a", np.array([1.5]))
    assert spec.problem("a", np.empty(0)) is None


class _Algo:
    class config:  # noqa: N801 - a stand-in for an AlgorithmConfig
        max_update_ratio, update_norm_floor = 10.0, 1.0

    def reply_schema(self, cid, message, info):
        return ReplySchema(ArraySpec((2,)), centers=message.params[None, :])

    def reply_problem(self, u, m, info):
        return None


def _round(params_by_client):
    infos = {k: ClientInfo(k, 10, 5) for k in params_by_client}
    msgs = {k: ServerMessage(np.zeros(2)) for k in params_by_client}
    ups = [ClientUpdate(k, np.asarray(p, float), 10) for k, p in params_by_client.items()]
    return screen_updates(_Algo(), ups, msgs, infos)


def test_norm_bound_widens_to_the_others_lower_median():
    valid, rejected = _round({0: [3.0, 4.0], 1: [0.0, 20.0], 2: [0.0, 200.0]})
    # deviations 5, 20, 200; the bound of each is 10 × max(0, 1, lower median of the others)
    assert [u.client_id for u in valid] == [0, 1] and [c for c, _ in rejected] == [2]
    assert "update norm 200 exceeds" in rejected[0][1]
    assert lower_median([5.0, 20.0]) == 5.0 and lower_median([]) == 0.0


def test_screening_refuses_strangers_repeats_and_the_unasked():
    infos = {0: ClientInfo(0, 10, 5), 1: ClientInfo(1, 10, 5)}
    msgs = {0: ServerMessage(np.zeros(2))}
    ups = [ClientUpdate(0, np.zeros(2), 10), ClientUpdate(0, np.zeros(2), 10), ClientUpdate(1, np.zeros(2), 10),
           ClientUpdate(7, np.zeros(2), 10), "junk"]
    valid, rejected = screen_updates(_Algo(), ups, msgs, infos)
    assert [u.client_id for u in valid] == [0]
    reasons = " | ".join(r for _, r in rejected)
    assert "second reply" in reasons and "not asked" in reasons and "not a client of this run" in reasons and "ClientUpdate" in reasons


def test_in_process_runner_drops_invalid_updates_and_records_why():
    import topofl
    from topofl.federation.pool import InProcessPool
    from topofl.federation.runner import run_rounds
    from topofl.methods import build_server as build
    from topofl.models.linear import make_model

    fed = topofl.make_scenario("healthcare", seed=0)
    algo = build("fedavg", {})
    model = make_model(fed.task, fed.n_features, 2, algo.config.l2)

    class Poisoned(InProcessPool):
        def fit(self, rnd, messages):
            updates, failures = super().fit(rnd, messages)
            updates[0] = ClientUpdate(updates[0].client_id, np.full_like(updates[0].params, np.nan), updates[0].n_examples)
            return updates, failures

    h = run_rounds(Poisoned(fed, algo, model, 0), algo, model, rounds=2, seed=0)
    assert [(f.round, f.client, f.stage) for f in h.failures] == [(1, 0, "fit"), (2, 0, "fit")]
    assert all(np.isfinite(r["loss"]) for r in h.records)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.floats(0, 1e6, allow_nan=False), st.sampled_from([0.0, 1.0, 2.0, math.inf])),
                max_size=50))
def test_the_norm_bounds_leave_one_out_medians_from_one_sort_equal_the_direct_ones(values):
    direct = [lower_median(values[:k] + values[k + 1:]) for k in range(len(values))]
    assert lower_medians_of_others(values) == direct


def _direct_medians_of_others(values):
    """The per-reply computation the one-sort version replaced (issue 22): sort the other K − 1 values for every k."""
    return [lower_median(values[:k] + values[k + 1:]) for k in range(len(values))]


@pytest.mark.parametrize("size", range(1, 51))
def test_a_rounds_screening_is_the_same_as_with_per_reply_medians(size, monkeypatch):
    """Every round of 1..50 replies, with many ties or none, with and without rejections: the valid replies,
    the rejected ones and every reason (the bound printed in it) are those of the per-reply computation.
    """
    import topofl.federation.validation as validation

    rng = np.random.default_rng(size)
    one_sort = validation.lower_medians_of_others
    for trial in range(40):
        if trial % 4 == 0:  # heavy ties: a few distinct sizes
            norms = rng.choice([0.0, 0.5, 3.0, 30.0, 400.0], size=size)
        elif trial % 4 == 1:  # all equal
            norms = np.full(size, float(rng.choice([0.0, 2.0, 50.0])))
        elif trial % 4 == 2:  # spread over six orders of magnitude: the bound rejects some
            norms = 10.0 ** rng.uniform(-2, 4, size=size)
        else:  # integers: ties and near-ties
            norms = rng.integers(0, 40, size=size).astype(float)
        clients = {k: [float(v), 0.0] for k, v in enumerate(norms)}
        order = rng.permutation(size).tolist()  # replies arrive in any order
        clients = {k: clients[k] for k in order}
        monkeypatch.setattr(validation, "lower_medians_of_others", one_sort)
        new = _round(clients)
        monkeypatch.setattr(validation, "lower_medians_of_others", _direct_medians_of_others)
        old = _round(clients)
        assert [u.client_id for u in new[0]] == [u.client_id for u in old[0]]
        assert all(a.params is b.params or np.array_equal(a.params, b.params) for a, b in zip(new[0], old[0], strict=True))
        assert new[1] == old[1]
