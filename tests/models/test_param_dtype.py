"""Issue 22: parameters in the model's own dtype with a layer layout, in process and on Flower's records.

A float32 PyTorch model replies in float32 (half the bytes of the old float64 contract, no cast);
servers sum in float64 and send the sum rounded to the model's dtype; the Flower records carry a
reply layer by layer (views of the vector) and rebuild it in one copy, after checking every layer's
dtype, shape and bytes. The NumPy linear models keep float64 throughout (tests/test_bit_identity.py).
"""
import numpy as np
import pytest

from topofl.algorithms import base as algorithms_base
from topofl.algorithms.base import weighted_average, weighted_sum
from topofl.federation.messages import ClientUpdate, ServerMessage, as_sent
from topofl.federation.validation import ArraySpec
from topofl.models.base import param_dtype, reply_dtypes
from topofl.models.linear import BinaryLogistic

torch = pytest.importorskip("torch")

from topofl.models.registry import build_model  # noqa: E402


@pytest.fixture(scope="module")
def cnn():
    return build_model("cnn-small", task="multiclass", n_features=784, n_classes=10)


def test_a_torch_model_replies_in_its_dtype_with_a_layout_that_covers_the_vector(cnn):
    from topofl.models.optimizers import LocalOptimizer, OptimizerSpec

    rng = np.random.default_rng(0)
    theta = cnn.init(rng)
    assert theta.dtype == np.float64          # the server's starting point: the module's values, exactly
    assert np.array_equal(theta.astype(np.float32).astype(np.float64), theta)
    X, y = rng.random((40, 784)), rng.integers(0, 10, 40)
    out = cnn.sgd(theta, X, y, epochs=1, batch_size=8, rng=np.random.default_rng(1),
                  optimizer=LocalOptimizer(OptimizerSpec("sgd", 0.05)))
    assert out.dtype == np.float32 and out.flags.c_contiguous and out.flags.writeable
    assert param_dtype(cnn) == np.float32 and reply_dtypes(cnn) == ("float64", "float32")
    # the same steps from the float32-rounded start give the same float32 reply (the module rounds on load)
    again = cnn.sgd(theta.astype(np.float32), X, y, epochs=1, batch_size=8, rng=np.random.default_rng(1),
                    optimizer=LocalOptimizer(OptimizerSpec("sgd", 0.05)))
    assert np.array_equal(out, again)
    names = [name for name, _ in cnn._rt.module.named_parameters()]
    layout = cnn.layout
    assert [s.name for s in layout] == names
    assert layout[0].offset == 0 and sum(s.size for s in layout) == cnn.n_params
    assert all(a.offset + a.size == b.offset for a, b in zip(layout, layout[1:], strict=False))
    for slot, p in zip(layout, cnn._rt.module.parameters(), strict=True):
        cnn._rt.load(out)
        assert np.array_equal(out[slot.offset:slot.offset + slot.size].reshape(slot.shape), p.detach().numpy())


def test_linear_models_keep_float64():
    m = BinaryLogistic(5)
    assert param_dtype(m) == np.float64 and reply_dtypes(m) == ("float64",)
    assert param_dtype(object()) == np.float64   # a user's model that declares nothing


def test_the_reply_check_takes_the_models_dtype_and_nothing_else():
    v32 = np.ones(4, dtype=np.float32)
    torch_spec, linear_spec = ArraySpec((4,), dtypes=("float64", "float32")), ArraySpec((4,))
    assert torch_spec.problem("params", v32) is None
    assert linear_spec.problem("params", v32) == "params must be float64; got float32"
    assert "must be float64 or float32; got float16" in torch_spec.problem("params", v32.astype(np.float16))
    assert "got >f8" in linear_spec.problem("params", np.ones(4, dtype=">f8"))   # byte order is part of the dtype
    bad = v32.copy()
    bad[2] = np.nan
    assert torch_spec.problem("params", bad) == "params holds 1 non-finite value(s)"
    huge = np.full(4, 3e38, dtype=np.float32)      # finite, but its float32 sum of squares overflows
    assert "overflows float32" in torch_spec.problem("params", huge)


def test_messages_are_sent_in_the_models_dtype_one_conversion_per_shared_array():
    g = np.linspace(0, 1, 7)
    shared = {0: ServerMessage(g), 1: ServerMessage(g), 2: ServerMessage(g + 1, config={"k": 1})}
    out = as_sent(shared, np.dtype(np.float32))
    assert all(m.params.dtype == np.float32 for m in out.values())
    assert out[0].params is out[1].params and out[2].params is not out[0].params
    assert out[2].config == {"k": 1} and np.array_equal(out[2].params, (g + 1).astype(np.float32))
    same = as_sent(shared, np.dtype(np.float64))
    assert all(same[k] is shared[k] for k in shared)    # float64: nothing converted, nothing copied


def test_float32_replies_are_summed_in_float64_in_place_or_stacked(monkeypatch):
    rng = np.random.default_rng(0)
    vectors = [rng.normal(size=1000).astype(np.float32) for _ in range(7)]
    weights = rng.random(7)
    exact = weighted_average([v.astype(np.float64) for v in vectors], weights)
    stacked = weighted_average(vectors, weights)
    monkeypatch.setattr(algorithms_base, "_STACK_LIMIT", 10)      # force the in-place branch
    monkeypatch.setattr(algorithms_base, "_BLOCK", 64)            # ... over several blocks
    in_place = weighted_average(vectors, weights)
    shares = algorithms_base.cap_shares(weights, 1.0)
    one_by_one = shares[0] * vectors[0].astype(np.float64)
    for s, v in zip(shares[1:], vectors[1:], strict=True):
        one_by_one += s * v.astype(np.float64)
    assert np.array_equal(in_place, one_by_one)                   # blocks change nothing: same additions, same order
    assert stacked.dtype == in_place.dtype == np.float64
    assert np.array_equal(stacked, exact)                         # float32 → float64 is exact
    np.testing.assert_allclose(in_place, exact, rtol=1e-13, atol=1e-15)
    # a float32 accumulator would be ~1e-7 off: the reason the server sums in float64
    f32 = np.zeros(1000, dtype=np.float32)
    shares = weights / weights.sum()
    for s, v in zip(shares.astype(np.float32), vectors, strict=True):
        f32 += s * v
    assert np.abs(f32 - exact).max() > 1e-9
    assert np.array_equal(weighted_sum(vectors, np.array([1.0] + [0.0] * 6)), vectors[0].astype(np.float64))


def test_flower_records_carry_a_reply_layer_by_layer_and_check_every_layer(cnn):
    pytest.importorskip("flwr")
    from flwr.app import Array, ArrayRecord

    from topofl.federation.validation import ReplySchema
    from topofl.flower.records import PayloadError, decode_update, encode_update, record_params

    theta = np.arange(cnn.n_params, dtype=np.float32) / cnn.n_params
    rd = encode_update(ClientUpdate(3, theta, 10), cnn.layout)
    assert list(rd["params"].keys()) == [s.name for s in cnn.layout]
    spec = ArraySpec((cnn.n_params,), dtypes=("float64", "float32"), layout=cnn.layout)
    back = decode_update(rd, ReplySchema(spec))
    assert back.params.dtype == np.float32 and np.array_equal(back.params, theta) and back.params.flags.writeable
    # a model without a layout, or a reply of another length, travels as one array "params"
    assert list(encode_update(ClientUpdate(3, theta[:5], 10), cnn.layout)["params"].keys()) == ["params"]
    assert np.array_equal(record_params(encode_update(ClientUpdate(3, theta, 10)), spec), theta)

    def tampered(name, array):
        rd = encode_update(ClientUpdate(3, theta, 10), cnn.layout)
        arrays = {k: rd["params"][k] for k in rd["params"]}
        arrays[name] = array
        rd["params"] = ArrayRecord(array_dict=arrays)
        return rd

    first, second = cnn.layout[0], cnn.layout[1]
    cases = [
        (tampered(first.name, Array(np.zeros(first.shape, dtype=np.float16))), "must be float64 or float32"),
        (tampered(first.name, Array(np.zeros((first.size,), dtype=np.float32))), "must have shape"),
        (tampered(second.name, Array(np.zeros(second.shape, dtype=np.float64))), "while the layers before it are"),
    ]
    for rd_bad, words in cases:
        with pytest.raises(PayloadError, match=f"layer .*{words}"):
            decode_update(rd_bad, ReplySchema(spec))
    # the layers of a linear-model spec (float64 only) are refused as float32
    with pytest.raises(PayloadError, match="must be float64"):
        decode_update(rd, ReplySchema(ArraySpec((cnn.n_params,), layout=cnn.layout)))
    # an extra array is not a layer: the record is then read as one "params" array and refused
    extra = dict(rd["params"].items())
    extra["intruder"] = Array(np.zeros(2, dtype=np.float32))
    rd["params"] = ArrayRecord(array_dict=extra)
    with pytest.raises(PayloadError, match="unexpected array"):
        decode_update(rd, ReplySchema(spec))


def test_a_float32_model_is_counted_at_four_bytes_a_number():
    import topofl

    fed = topofl.make_scenario("healthcare", 0, n_clients=6, n_min=40, n_max=60)
    h = topofl.simulate(fed, "fedavg", rounds=1, seed=0, model="mlp")
    lin = topofl.simulate(fed, "fedavg", rounds=1, seed=0)
    for r in h.records:
        assert r["floats_up"] > 0 and r["bytes_up"] == 4 * r["floats_up"] and r["bytes_down"] == 4 * r["floats_down"]
    assert all(r["bytes_up"] == 8 * r["floats_up"] for r in lin.records)
    assert h.rounds[0].bytes_up == sum(r["bytes_up"] for r in h.records)
