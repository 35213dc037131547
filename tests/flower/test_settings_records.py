"""Run-config settings (no Flower needed) and the record codecs (Flower's records)."""
import numpy as np
import pytest

from topofl.flower.settings import FlowerSettings, parse_pairs


def test_settings_from_run_config_parse_and_validate():
    s = FlowerSettings.from_run_config({
        "method": "sheaf", "num-server-rounds": 4, "hyperparameters": "gamma=0.1,lam=0.01",
        "scenario-params": "n_clients=3,adversarial=(1,)", "round-timeout": 5, "pooled-metrics": True,
    })
    assert s.decentralised and s.job.rounds == 4 and s.round_timeout == 5.0
    assert dict(s.job.hyperparameters) == {"gamma": 0.1, "lam": 0.01}
    assert dict(s.job.data_params) == {"n_clients": 3, "adversarial": (1,)}
    assert s.node_config()["method"] == "sheaf" and not FlowerSettings.from_flat().decentralised


@pytest.mark.parametrize("config, words", [
    ({"method": "nope"}, "unknown method .nope.; available"),
    ({"num-server-rounds": 0}, "num-server-rounds must be in"),
    ({"round-timeout": -1.0}, "round-timeout must be in"),
    ({"min-replies": -1}, "min-replies must be in"),
    ({"scenario": "mars"}, "scenario must be one of"),
    ({"rounds": 3}, "unknown run-config key"),
    ({"hyperparameters": "lr"}, "hyperparameters takes KEY=VALUE"),
    ({"pooled-metrics": "yes"}, "pooled-metrics must be true or false"),
])
def test_bad_run_config_names_the_key_and_value(config, words):
    with pytest.raises(ValueError, match=words):
        FlowerSettings.from_run_config(config)


def test_parse_pairs_keeps_bracketed_commas():
    assert parse_pairs("a=1, b=[1, 2],c=x", "k") == {"a": 1, "b": [1, 2], "c": "x"}
    assert parse_pairs("", "k") == {}


def test_update_and_message_round_trip_through_records():
    pytest.importorskip("flwr")
    from topofl.federation.messages import ClientUpdate, ServerMessage
    from topofl.flower.records import decode_server_message, decode_update, encode_server_message, encode_update

    rng = np.random.default_rng(0)
    u = ClientUpdate(3, rng.standard_normal(21), 57, descriptor=rng.standard_normal(48), metrics={"rho": 0.5}, extras={"dc": rng.standard_normal(21)})
    back = decode_update(encode_update(u))
    assert back.client_id == 3 and back.n_examples == 57 and dict(back.metrics) == {"rho": 0.5}
    np.testing.assert_array_equal(back.params, u.params)
    np.testing.assert_array_equal(back.descriptor, u.descriptor)
    np.testing.assert_array_equal(back.extras["dc"], u.extras["dc"])
    assert back.params.dtype == np.float64
    m = ServerMessage(rng.standard_normal(5), config={"lr_scale": 2.0, "need_descriptor": True}, extras={"c": np.zeros(5)})
    msg, config = decode_server_message(encode_server_message(m, {"method": "scaffold"}, 4))
    assert config["round"] == 4 and config["method"] == "scaffold" and msg.config["lr_scale"] == 2.0
    np.testing.assert_array_equal(msg.params, m.params)


def test_malformed_reply_is_a_payload_error_naming_the_record():
    pytest.importorskip("flwr")
    from flwr.app import ConfigRecord, RecordDict

    from topofl.flower.records import PayloadError, decode_update

    with pytest.raises(PayloadError, match="'params' is missing"):
        decode_update(RecordDict({"meta": ConfigRecord({"client": 1})}))


def test_the_example_apps_run_config_lists_every_key_with_its_default():
    """examples/flower-app/pyproject.toml is what `flwr run` reads: every settings key, each with our default."""
    from pathlib import Path

    import tomllib

    from topofl.flower.settings import KEYS

    path = Path(__file__).resolve().parents[2] / "examples" / "flower-app" / "pyproject.toml"
    config = tomllib.loads(path.read_text())["tool"]["flwr"]["app"]["config"]
    assert set(config) == set(KEYS)
    for key, (_, default, _) in KEYS.items():
        assert config[key] == default, key
    assert FlowerSettings.from_run_config(config) == FlowerSettings.from_flat()
