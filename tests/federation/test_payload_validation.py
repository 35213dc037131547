"""Server-side payload validation (issue 5) used by every runtime before aggregation."""
import numpy as np
import pytest

from topofl.federation.messages import ClientUpdate, validate_update


def update(**kw):
    base = dict(client_id=0, params=np.zeros(4), n_examples=10, descriptor=np.ones(48))
    return ClientUpdate(**{**base, **kw})


def test_sound_update_passes():
    assert validate_update(update(), 4, 48) is None
    assert validate_update(update(descriptor=None), 4, 48) is None


@pytest.mark.parametrize("kw, words", [
    ({"params": np.zeros(5)}, "shape (4,)"),
    ({"params": np.zeros((2, 2))}, "shape (4,)"),
    ({"params": np.zeros(4, dtype=int)}, "float array"),
    ({"params": np.array([0.0, np.nan, 0.0, np.inf])}, "2 non-finite"),
    ({"n_examples": -1}, "non-negative integer"),
    ({"n_examples": 2.5}, "non-negative integer"),
    ({"n_examples": True}, "non-negative integer"),
    ({"descriptor": np.ones(47)}, "length 48"),
    ({"descriptor": np.ones((48, 1))}, "1-D float"),
    ({"descriptor": np.r_[np.ones(47), np.nan]}, "descriptor holds 1 non-finite"),
    ({"extras": {"dc": np.array([np.nan])}}, "extras['dc'] holds"),
    ({"extras": {"dc": np.array(["a"])}}, "must be numeric"),
])
def test_unsound_update_is_named(kw, words):
    reason = validate_update(update(**kw), 4, 48)
    assert reason is not None and words in reason


def test_in_process_runner_drops_invalid_updates_and_records_why():
    import topofl
    from topofl.algorithms.registry import build
    from topofl.federation.pool import InProcessPool
    from topofl.federation.runner import run_rounds
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
