"""Models that can be used after training (issue 24): what a run learned travels with its preprocessing.

``predict`` on the raw rows of a held-out split gives exactly the scores the run reported — in Python
(``Federation.from_arrays(..., standardise="federated")``, the heart-disease loader's imputation, a
``--data`` CSV) and through ``topofl predict`` on a CSV; the preprocessing is written into the models file
and validated when read; an old file without it loads with a warning; per-client final metrics are in
every result; Sheaf-FMTL's models save; a wrong column count is refused, naming it."""
from __future__ import annotations

import csv
import json
import warnings

import numpy as np
import pytest
from typer.testing import CliRunner

import topofl
from helpers import blob_client, one_line_error
from topofl.cli import app
from topofl.data.partition import train_test_split
from topofl.data.prediction import score_rows
from topofl.models.io import NoPreprocessingWarning
from topofl.models.preprocessing import Preprocessing

runner = CliRunner()


def breast_cancer_arrays(n_clients=4, seed=0):
    """Raw (unscaled) breast-cancer rows split over clients, as a user holds them: features span 1e-3..4e3."""
    from sklearn.datasets import load_breast_cancer

    X, y = load_breast_cancer(return_X_y=True)
    parts = np.array_split(np.random.default_rng(seed).permutation(len(y)), n_clients)
    out = []
    for k, p in enumerate(parts):
        tr, te = train_test_split(y[p].astype(float), 0.25, np.random.default_rng(k))
        out.append((X[p][tr], y[p][tr], X[p][te], y[p][te]))
    return out


def final_record(h, k):
    last = max(r["round"] for r in h.records)
    return next(r for r in h.records if r["round"] == last and r["client"] == k)


@pytest.mark.parametrize("standardise", ["federated", "per_client"])
@pytest.mark.parametrize("method", ["fedavg", "ditto", "ptopofl"])
def test_predict_on_raw_rows_reproduces_the_reported_scores(standardise, method):
    arrays = breast_cancer_arrays()
    fed = topofl.Federation.from_arrays(arrays, standardise=standardise, sites=["a", "b", "c", "d"])
    h = topofl.simulate(fed, method, rounds=3, seed=0)
    for k, (_, _, X_test, y_test) in enumerate(arrays):
        ev = final_record(h, k)
        scores = h.score(X_test, y_test, client=k)
        assert scores["accuracy"] == ev["accuracy"] and scores["auc"] == ev["auc"]
        # the same rows, as the federation holds them, give the same scores bit for bit
        np.testing.assert_array_equal(h.predict(X_test, client=k), h.predict(fed[k].X_test, client=k, preprocessed=True))
        # a client may be named by its site
        np.testing.assert_array_equal(h.predict(X_test, client="abcd"[k]), h.predict(X_test, client=k))
        assert h.client_metrics[k]["accuracy"] == ev["accuracy"]


def test_the_issues_breast_cancer_case_no_longer_loses_its_scaling(tmp_path):
    arrays = breast_cancer_arrays()
    fed = topofl.Federation.from_arrays(arrays, standardise="federated")
    h = topofl.simulate(fed, "fedavg", rounds=5, seed=0)
    X_test, y_test = arrays[0][2], arrays[0][3]
    reported = final_record(h, 0)["accuracy"]
    assert reported > 0.85
    assert np.mean((h.predict(X_test, client=0) >= 0.5) == y_test) == reported
    loaded = topofl.load_models(topofl.save_models(h, tmp_path / "m.npz"))
    assert score_rows(loaded, X_test, y_test, client=0)["accuracy"] == reported
    np.testing.assert_array_equal(loaded.predict(X_test, client=0), h.predict(X_test, client=0))
    assert loaded.preprocessing == fed.preprocessing


def test_heart_disease_raw_rows_with_missing_values_score_as_reported(tmp_path):
    from topofl.data.loaders.heart_disease import SITES, heart_disease_dir, read_site

    fed = topofl.make_scenario("heart-disease", seed=3)
    prep = fed.preprocessing
    assert prep.sites == tuple(SITES) and prep.feature_names[4] == "chol" and prep.impute is not None
    h = topofl.simulate(fed, "ditto", rounds=3, seed=0)
    loaded = topofl.load_models(topofl.save_models(h, tmp_path / "heart.npz"))
    assert loaded.sites == dict(enumerate(SITES))
    for k, site in enumerate(SITES):
        X, num = read_site(heart_disease_dir() / SITES[site])
        raw = np.where(np.isnan(X[:, [4]]) & (np.arange(X.shape[1]) == 4), 0.0, X)  # a 0 cholesterol, as recorded
        y = (num > 0).astype(int)
        _, te = train_test_split(y, 0.25, np.random.default_rng(np.random.SeedSequence([3, k, 0x4EA7])))
        ev = final_record(h, k)
        for models in (h.model_set(), loaded):
            s = score_rows(models, raw[te], y[te], client=site)
            assert (s["accuracy"], s["auc"]) == (ev["accuracy"], ev["auc"]), site
        np.testing.assert_array_equal(loaded.predict(raw[te], client=site),
                                      h.predict(fed[k].X_test, client=k, preprocessed=True))


def test_labels_come_back_as_the_data_named_them():
    rng = np.random.default_rng(0)
    arrays = [blob_client(rng, 80) for _ in range(3)]
    signed = [(a, 2 * b - 1, c, 2 * d - 1) for a, b, c, d in arrays]  # labels {-1, +1}
    fed = topofl.Federation.from_arrays(signed, task="binary", standardise="federated")
    assert fed.preprocessing.classes == (-1.0, 1.0)
    h = topofl.simulate(fed, "fedavg", rounds=2, seed=0)
    X_test, y_test = signed[1][2], signed[1][3]
    assert set(np.unique(h.predict_labels(X_test, client=1))) <= {-1.0, 1.0}
    assert h.score(X_test, y_test, client=1)["accuracy"] == final_record(h, 1)["accuracy"]
    fed3 = topofl.Federation.from_arrays([(a, b * 10 + 5, c, d * 10 + 5) for a, b, c, d in arrays], classes=[15, 5])
    assert fed3.preprocessing.classes == (15.0, 5.0)
    h3 = topofl.simulate(fed3, "local", rounds=1, seed=0)
    assert set(np.unique(h3.predict_labels(arrays[0][2], client=0))) <= {5.0, 15.0}
    # preprocessed=True is about the rows only: labels in and out are the data's own, as without it
    X0, ids0 = fed3[0].X_test, fed3[0].y_test
    assert set(np.unique(h3.predict_labels(X0, client=0, preprocessed=True))) <= {5.0, 15.0}
    data_labels = fed3.preprocessing.labels(ids0)
    assert h3.score(X0, data_labels, client=0, preprocessed=True)["accuracy"] == final_record(h3, 0)["accuracy"]
    with pytest.raises(ValueError, match=r"label \d is not one of the model's classes \{15, 5\}.*labels\(class_ids\)"):
        h3.score(X0, ids0, client=0, preprocessed=True)   # the federation's class ids are not the data's labels


def test_wrong_rows_are_refused_naming_the_columns():
    fed = topofl.Federation.from_arrays(breast_cancer_arrays(3), standardise="federated",
                                        feature_names=[f"f{j}" for j in range(30)])
    h = topofl.simulate(fed, "fedavg", rounds=1, seed=0)
    with pytest.raises(ValueError, match=r"rows have 29 columns; the model takes 30 \(f0, f1"):
        h.predict(np.zeros((2, 29)), client=0)
    with pytest.raises(ValueError, match="missing value.*column 'f3'"):
        h.predict(np.where(np.arange(30) == 3, np.nan, 1.0), client=0)
    with pytest.raises(ValueError, match="no site named 'x'"):
        h.predict(np.zeros((1, 30)), client="x")
    with pytest.raises(ValueError, match="client id in 0..2"):
        h.predict(np.zeros((1, 30)), client=7)
    assert h.predict(np.zeros(30), client=0).shape == (1,)   # one row may be 1-D


def test_per_client_standardisation_needs_a_client_for_the_servers_model():
    fed = topofl.Federation.from_arrays(breast_cancer_arrays(3), standardise="per_client")
    h = topofl.simulate(fed, "fedavg", rounds=1, seed=0)
    with pytest.raises(ValueError, match="its own statistics.*pass client=k"):
        h.predict(np.ones((1, 30)))
    fed = topofl.Federation.from_arrays(breast_cancer_arrays(3), standardise="federated")
    h = topofl.simulate(fed, "fedavg", rounds=1, seed=0)
    np.testing.assert_array_equal(h.predict(fed[0].X_test, preprocessed=True), h.predict(breast_cancer_arrays(3)[0][2]))


def test_the_membership_probe_takes_the_federations_rows_as_they_are():
    from topofl.experiments.security import privacy_probe

    fed = topofl.Federation.from_arrays(breast_cancer_arrays(3), standardise="federated")
    h = topofl.simulate(fed, "fedavg", rounds=2, seed=0)
    for row in privacy_probe.membership_rows(fed, h, "fedavg", 0):
        k = row["client"]   # the rows are standardised already: not standardised a second time
        losses = privacy_probe.example_losses(h.predict(fed[k].X_test, client=k, preprocessed=True), fed[k].y_test)
        assert row["test_loss"] == float(losses.mean())


def test_every_method_reports_per_client_final_metrics():
    rng = np.random.default_rng(1)
    fed = topofl.Federation.from_arrays([blob_client(rng, 60) for _ in range(3)])
    for method in topofl.methods.available("server"):
        h = topofl.simulate(fed, method, rounds=2, seed=0)
        assert sorted(h.client_metrics) == [0, 1, 2], method
        for k, m in h.client_metrics.items():
            ev = final_record(h, k)
            assert (m["accuracy"], m["auc"], m["round"]) == (ev["accuracy"], ev["auc"], 2), method
    h = topofl.simulate(fed, "ptopofl", rounds=1, seed=0)
    assert "risk_descriptor" in h.client_metrics[0] and "accuracy" in h.client_metrics[0]


def test_sheaf_models_save_load_and_predict(tmp_path):
    from helpers import multiclass_peers

    h = topofl.simulate_decentralised(multiclass_peers([5, 5, 5, 5]), "sheaf", rounds=3, seed=0, gamma=0.5)
    assert h.model is None and h.client_metrics[2]["accuracy"] == final_record(h, 2)["accuracy"]
    loaded = topofl.load_models(topofl.save_models(h, tmp_path / "sheaf.npz"))
    X = np.random.default_rng(0).standard_normal((7, 5))
    for k in range(4):
        np.testing.assert_array_equal(loaded.predict(X, client=k), h.predict(X, client=k))
    # models of different sizes (a heterogeneous federation) are saved with a description each
    het = topofl.simulate_decentralised(multiclass_peers([4, 6, 5]), "sheaf", rounds=2, seed=0, gamma=0.5)
    loaded = topofl.load_models(topofl.save_models(het, tmp_path / "het.npz"))
    assert loaded.manifest["model"] is None and set(loaded.manifest["client_model"]) == {"0", "1", "2"}
    X1 = np.random.default_rng(1).standard_normal((3, 6))
    np.testing.assert_array_equal(loaded.predict(X1, client=1), het.predict(X1, client=1))
    with pytest.raises(ValueError, match="differ.*pass client=k"):
        loaded.predict(X1)


def test_peers_on_a_standardised_federation_take_raw_rows():
    arrays = breast_cancer_arrays(4)
    fed = topofl.Federation.from_arrays(arrays, standardise="federated")
    h = topofl.simulate_decentralised(fed, "dfedu", rounds=2, seed=0, graph="ring")
    assert h.preprocessing == fed.preprocessing
    assert h.score(arrays[3][2], arrays[3][3], client=3)["accuracy"] == final_record(h, 3)["accuracy"]
    # naming the federation's own task or class count keeps its preprocessing; contradicting it is refused
    for kw in ({"task": "binary"}, {"n_classes": 2}, {"task": "binary", "n_classes": 2}):
        same = topofl.simulate_decentralised(fed, "dfedu", rounds=2, seed=0, graph="ring", **kw)
        assert same.preprocessing == fed.preprocessing, kw
        assert same.score(arrays[3][2], arrays[3][3], client=3)["accuracy"] == final_record(same, 3)["accuracy"]
    with pytest.raises(ValueError, match="task='regression' contradicts the data's task 'binary'"):
        topofl.simulate_decentralised(fed, "dfedu", rounds=1, seed=0, task="regression")
    with pytest.raises(ValueError, match="n_classes=3 contradicts the data's 2 classes"):
        topofl.simulate_decentralised(fed, "dfedu", rounds=1, seed=0, n_classes=3)


def _rewrite(path, out, change):
    """A copy of models file ``path`` with its manifest (and arrays) changed by ``change(manifest, arrays)``,
    the hashes of the arrays kept consistent (as a careful forger would)."""
    from topofl.models.io import _sha

    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    manifest = json.loads(bytes(arrays.pop("manifest")).decode())
    change(manifest, arrays)
    manifest["sha256"] = {k: _sha(v) for k, v in arrays.items()}
    arrays["manifest"] = np.frombuffer(json.dumps(manifest).encode(), dtype=np.uint8)
    np.savez(out, **arrays)
    return out


def test_an_old_file_without_preprocessing_loads_with_a_warning(tmp_path):
    arrays = breast_cancer_arrays(3)
    fed = topofl.Federation.from_arrays(arrays, standardise="federated")
    h = topofl.simulate(fed, "fedavg", rounds=1, seed=0)
    path = topofl.save_models(h, tmp_path / "new.npz")

    old = _rewrite(path, tmp_path / "old.npz", _as_format_1)
    with pytest.warns(NoPreprocessingWarning, match="predict takes rows preprocessed"):
        loaded = topofl.load_models(old)
    assert loaded.preprocessing is None
    # it predicts what it always did: rows preprocessed as the federation's
    np.testing.assert_array_equal(loaded.predict(fed[1].X_test, client=1), h.predict(arrays[1][2], client=1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        topofl.load_models(path)   # a current file loads without a warning


@pytest.mark.parametrize("change, message", [
    (lambda m, a: a.__setitem__("preprocessing/scale", np.zeros_like(a["preprocessing/scale"])), "scale must be positive"),
    (lambda m, a: a.__setitem__("preprocessing/mean", a["preprocessing/mean"][:, :3]), "mean must have shape"),
    (lambda m, a: m["preprocessing"].__setitem__("feature_names", ["a"] * 30), "distinct"),
    (lambda m, a: m["preprocessing"].__setitem__("standardise", 3), "standardise must be a string"),
    (lambda m, a: m["preprocessing"].__setitem__("sites", ["x"]), "sites must name each"),
    (lambda m, a: m["preprocessing"].pop("classes"), "must have the entries"),
    (lambda m, a: a.__setitem__("preprocessing/other", np.ones(3)), "unknown array"),
    (lambda m, a: a.__setitem__("client/0/params", np.full_like(a["client/0/params"], np.inf)), "non-finite"),
    (lambda m, a: a.__setitem__("client/0/params", a["client/0/params"][:-1]), "parameters"),
    (lambda m, a: m.__setitem__("seed", "zero"), "method and seed"),
    (lambda m, a: m.__setitem__("method", "fedavg\x1b[2J"), "method and seed"),
])
def test_everything_read_from_a_models_file_is_validated(tmp_path, change, message):
    fed = topofl.Federation.from_arrays(breast_cancer_arrays(3), standardise="federated", sites=["a", "b", "c"])
    path = topofl.save_models(topofl.simulate(fed, "fedavg", rounds=1, seed=0), tmp_path / "m.npz")
    bad = _rewrite(path, tmp_path / "bad.npz", change)
    with pytest.raises(ValueError, match=message):
        topofl.load_models(bad)


def test_hostile_models_files_are_refused_naming_the_file(tmp_path):
    fed = topofl.Federation.from_arrays(breast_cancer_arrays(3), standardise="federated", sites=["a", "b", "c"])
    path = topofl.save_models(topofl.simulate(fed, "fedavg", rounds=1, seed=0), tmp_path / "m.npz")
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    text = bytes(arrays["manifest"]).decode()
    deep = text[:-1] + ', "deep": ' + "[" * 100000 + "]" * 100000 + "}"
    np.savez(tmp_path / "deep.npz", **{**arrays, "manifest": np.frombuffer(deep.encode(), dtype=np.uint8)})
    with pytest.raises(ValueError, match=r"deep\.npz: not a topofl models file \(its manifest is nested too deeply"):
        topofl.load_models(tmp_path / "deep.npz")
    # a zip bomb: a small file whose members inflate to much more; np.savez stores its members uncompressed
    np.savez_compressed(tmp_path / "bomb.npz", **arrays, pad=np.zeros(2 * 10**6))
    with pytest.raises(ValueError, match=r"bomb\.npz: not a topofl models file \(member '.*' is compressed"):
        topofl.load_models(tmp_path / "bomb.npz")
    np.savez_compressed(tmp_path / "packed.npz", **arrays)
    with pytest.raises(ValueError, match=r"packed\.npz.*compressed"):
        topofl.load_models(tmp_path / "packed.npz")
    # control characters in names (terminal escapes) are refused
    esc = _rewrite(path, tmp_path / "esc.npz", lambda m, a: m["preprocessing"]["sites"].__setitem__(1, "b\x1b[2J"))
    with pytest.raises(ValueError, match=r"esc\.npz: invalid preprocessing record: sites.*control character"):
        topofl.load_models(esc)
    # a model description that does not fit the saved parameters is refused before anything is built
    for change, message in [(lambda m, a: m["model"].__setitem__("n_params", 10**9), "describes 1000000000 param"),
                            (lambda m, a: m["model"].__setitem__("n_features", 10**12), "n_features"),
                            (lambda m, a: m["model"].__setitem__("task", 7), "task")]:
        bad = _rewrite(path, tmp_path / "bad.npz", change)
        with pytest.raises(ValueError, match=rf"bad\.npz: .*{message}"):
            topofl.load_models(bad)


@pytest.mark.parametrize("sites, message", [
    (["a", "b", "a"], r"sites name 'a' twice"),
    (["a", "", "c"], r"sites must hold non-empty one-line names .* got ''"),
    (["a", "b" * 201, "c"], r"at most 200 characters; got 'bbbb"),
    (["a", "b\x1b[2J", "c"], r"sites\[1\] 'b\\x1b\[2J' holds a control character"),
])
def test_from_arrays_refuses_bad_site_names_naming_them(sites, message):
    with pytest.raises(ValueError, match=message):
        topofl.Federation.from_arrays(breast_cancer_arrays(3), sites=sites)


def test_names_with_control_characters_are_refused():
    with pytest.raises(ValueError, match=r"feature_names\[1\] 'b\\x07' holds a control character"):
        Preprocessing(2, ("a", "b\x07"))
    with pytest.raises(ValueError, match=r"sites\[0\] 'x\\n' holds a control character"):
        Preprocessing(1, ("a",), sites=("x\n",))


def test_a_zero_that_means_missing_needs_a_client_where_clients_impute_differently():
    p = Preprocessing(2, ("age", "chol"), impute=[[50.0, 200.0], [60.0, 240.0]], zero_is_missing=(1,))
    with pytest.raises(ValueError, match="missing values, which each client imputes"):
        p.transform([[55.0, 0.0]])   # chol = 0 is not measured: client 0's or client 1's median?
    np.testing.assert_array_equal(p.transform([[55.0, 0.0]], 1), [[55.0, 240.0]])
    np.testing.assert_array_equal(p.transform([[55.0, 210.0]]), [[55.0, 210.0]])


def test_rows_rescaled_by_a_loader_are_not_taken_raw():
    p = Preprocessing(2, ("a", "b"), rescaled="values scaled by 1/16")
    assert not p.identity and Preprocessing.from_manifest(*p.to_manifest()) == p
    with pytest.raises(ValueError, match=r"rescaled by the data's loader \(values scaled by 1/16\).*preprocessed=True"):
        p.transform([[1.0, 2.0]], 0)
    assert "rescaled" not in Preprocessing(2, ("a", "b")).to_manifest()[0]   # files without it read as before
    from topofl.data.loaders import rotated_digits

    digits = rotated_digits(seed=0, n_clients=8)
    assert "1/16" in digits.preprocessing.rescaled
    h = topofl.simulate_decentralised(digits, "local-peers", rounds=1, seed=0, graph="ring")
    with pytest.raises(ValueError, match="rescaled by the data's loader"):
        h.predict(digits.clients[0].X_test * 16, client=0)
    assert h.predict(digits.clients[0].X_test, client=0, preprocessed=True).shape[0] == digits.clients[0].X_test.shape[0]
    fed = topofl.Federation(digits.clients, digits.task, digits.n_classes, preprocessing=digits.preprocessing)
    assert fed.preprocessing.rescaled == digits.preprocessing.rescaled
    from topofl.data.loaders.mnist10k import mnist_federation

    images = mnist_federation(3, partition_kind="iid", n_samples=300, seed=0, min_size=10, styles=0.5)
    assert "1/255" in images.preprocessing.rescaled and "style" in images.preprocessing.rescaled


def test_preprocessing_record_is_validated_where_it_is_built():
    with pytest.raises(ValueError, match="needs mean and scale"):
        Preprocessing(2, ("a", "b"), standardise="federated")
    with pytest.raises(ValueError, match="shares one mean"):
        Preprocessing(2, ("a",), standardise="federated", mean=[[0.0], [1.0]], scale=[[1.0], [1.0]])
    with pytest.raises(ValueError, match="indicators and zero_is_missing go with imputation"):
        Preprocessing(1, ("a",), indicators=(0,))
    with pytest.raises(ValueError, match="column indices in 0..0"):
        Preprocessing(1, ("a",), impute=[[0.0]], indicators=(3,))
    p = Preprocessing(2, ("a", "b"), sites=("s", "t"), standardise="per_client", mean=[[0, 1], [2, 3]],
                      scale=[[1, 2], [1, 1]])
    np.testing.assert_array_equal(p.transform([[1.0, 1.0]], "t"), [[-1.0, -2.0]])
    assert p.mean is not None and not p.mean.flags.writeable


# ---- the command line: topofl run --data CSV --save-models, then topofl predict -------------------------------
def _write_sites_csv(path, rng):
    """A CSV of three sites whose features span very different scales (a standardise='federated' case)."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["site", "age", "chol", "bmi", "y"])
        for site, shift in (("north", 0.0), ("south", 0.5), ("west", -0.5)):
            for _ in range(60):
                age, chol, bmi = rng.normal(50 + 10 * shift, 10), rng.normal(220, 40), rng.normal(27, 4)
                y = int(0.08 * (age - 50) + 0.02 * (chol - 220) + rng.normal(0, 1) > 0)
                w.writerow([site, f"{age:.1f}", f"{chol:.0f}", f"{bmi:.1f}", y])


def _held_out_csv(data, out, seed=0):
    """The held-out rows of a ``--data`` run with ``seed`` (its per-site split), columns in another order."""
    from topofl.data.loaders.tables import held_out_sites

    with open(out, "w", newline="") as f:
        w = csv.writer(f)
        sites = held_out_sites(data, "site", "y", seed=seed)
        w.writerow(["note", "y", *reversed(sites[0][3]), "site"])
        for site, X, y, _ in sites:
            for row, label in zip(X, y, strict=True):
                w.writerow(["held out", int(label), *[repr(float(v)) for v in row[::-1]], site])
    return out


def test_topofl_predict_on_a_csv_reproduces_the_reported_scores(tmp_path):
    data = tmp_path / "sites.csv"
    _write_sites_csv(data, np.random.default_rng(0))
    res = runner.invoke(app, ["run", "--data", str(data), "--method", "fedavg", "--rounds", "3",
                              "--save-models", str(tmp_path / "models"), "--out", str(tmp_path / "run")])
    assert res.exit_code == 0, res.output
    with open(tmp_path / "run" / "rounds.csv") as f:
        reported = {int(r["client"]): r for r in csv.DictReader(f) if r["round"] == "3"}
    held = _held_out_csv(data, tmp_path / "held.csv")
    preds = tmp_path / "preds.csv"
    res = runner.invoke(app, ["predict", str(tmp_path / "models" / "fedavg-seed0.npz"), str(held), "--out", str(preds)],
                        env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "columns not read by the models: note" in res.output
    for k, site in enumerate(("north", "south", "west")):
        line = next(ln for ln in res.output.splitlines() if site in ln)
        acc, auc = (float(v) for v in line.replace("│", " ").split()[-2:])
        assert acc == pytest.approx(float(reported[k]["accuracy"]), abs=5e-4)
        assert auc == pytest.approx(float(reported[k]["auc"]), abs=5e-4)
    # the exact scores, from the same file in Python
    loaded = topofl.load_models(tmp_path / "models" / "fedavg-seed0.npz")
    from topofl.data.prediction import predict_table

    table = predict_table(loaded, held)
    for row in table.scores:
        assert row["accuracy"] == pytest.approx(float(reported[row["client"]]["accuracy"]), abs=1e-9)
        assert row["auc"] == pytest.approx(float(reported[row["client"]]["auc"]), abs=1e-9)
    with open(preds) as f:
        out = list(csv.DictReader(f))
    assert list(out[0]) == ["line", "site", "client", "p_1", "prediction"] and len(out) == len(table.rows)
    assert {r["site"] for r in out} == {"north", "south", "west"} and out[0]["line"] == "2"


def test_topofl_predict_writes_csv_to_stdout_and_refuses_bad_files(tmp_path):
    data = tmp_path / "sites.csv"
    _write_sites_csv(data, np.random.default_rng(1))
    runner.invoke(app, ["run", "--data", str(data), "--method", "local", "--rounds", "1",
                        "--save-models", str(tmp_path / "m")])
    models = str(tmp_path / "m" / "local-seed0.npz")
    rows = tmp_path / "rows.csv"
    rows.write_text("chol,age,bmi\n200,40,25\n250,60,31\n")
    res = runner.invoke(app, ["predict", models, str(rows), "--client", "south"])
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines()[0] == "line,site,client,p_1,prediction" and len(res.stdout.splitlines()) == 3
    assert res.stdout.splitlines()[1].startswith("2,south,1,")
    # local training keeps no server model: the rows need a site or --client
    one_line_error(runner.invoke(app, ["predict", models, str(rows)]), "pass --client K")
    (tmp_path / "short.csv").write_text("age,bmi\n40,25\n")
    one_line_error(runner.invoke(app, ["predict", models, str(tmp_path / "short.csv"), "--client", "0"]),
                   "column(s) 'chol' are missing")
    (tmp_path / "site.csv").write_text("site,age,chol,bmi\neast,40,200,25\n")
    one_line_error(runner.invoke(app, ["predict", models, str(tmp_path / "site.csv")]), "no site named 'east'")
    (tmp_path / "gap.csv").write_text("age,chol,bmi\n40,,25\n")
    one_line_error(runner.invoke(app, ["predict", models, str(tmp_path / "gap.csv"), "--client", "0"]),
                   "line 2", "'chol' is empty")
    one_line_error(runner.invoke(app, ["predict", models, str(rows), "--model", "nope.nothing:make"]),
                   "--model 'nope.nothing:make'", "cannot import")
    (tmp_path / "foreign.npz").write_bytes(b"not a zip")
    one_line_error(runner.invoke(app, ["predict", str(tmp_path / "foreign.npz"), str(rows)]),
                   "not a topofl models file")


def test_topofl_predict_out_refuses_to_overwrite(tmp_path):
    data = tmp_path / "sites.csv"
    _write_sites_csv(data, np.random.default_rng(2))
    runner.invoke(app, ["run", "--data", str(data), "--method", "local", "--rounds", "1",
                        "--save-models", str(tmp_path / "m")])
    models = tmp_path / "m" / "local-seed0.npz"
    before = models.read_bytes(), data.read_bytes()
    out = tmp_path / "preds.csv"
    out.write_text("keep me\n")
    args = ["predict", str(models), str(data), "--label-column", "y"]
    one_line_error(runner.invoke(app, [*args, "--out", str(out)]), "--out", "exists", "--overwrite")
    assert out.read_text() == "keep me\n"
    assert runner.invoke(app, [*args, "--out", str(out), "--overwrite"]).exit_code == 0
    assert out.read_text().startswith("line,site,client,")
    # the models or the data file itself is never overwritten, --overwrite or not
    for victim in (models, data, tmp_path / "m" / ".." / "sites.csv"):
        one_line_error(runner.invoke(app, [*args, "--out", str(victim), "--overwrite"]), "--out", "is the")
    assert (models.read_bytes(), data.read_bytes()) == before


def _as_format_1(m, a):
    m["format"] = "topofl-models/1"
    for key in ("preprocessing", "client_model"):
        del m[key]
    for k in [k for k in a if k.startswith("preprocessing/")]:
        del a[k]


def test_topofl_predict_with_an_old_file_checks_and_prints_the_columns_it_reads(tmp_path):
    data = tmp_path / "sites.csv"
    _write_sites_csv(data, np.random.default_rng(3))
    runner.invoke(app, ["run", "--data", str(data), "--method", "local", "--rounds", "1",
                        "--save-models", str(tmp_path / "m")])
    old = _rewrite(tmp_path / "m" / "local-seed0.npz", tmp_path / "old.npz", _as_format_1)
    rows = tmp_path / "rows.csv"
    def refused(res, *fragments):   # the format-1 warning, then one error line
        assert res.exit_code == 2, res.output
        last = [ln for ln in res.output.strip().splitlines() if ln.strip()][-1]
        assert last.startswith("Error:") and all(f in last for f in fragments), last

    rows.write_text("note,age,chol,bmi\n7,0.1,0.2,0.3\n")
    refused(runner.invoke(app, ["predict", str(old), str(rows), "--client", "0"]),
            "4 columns (note, age, chol, bmi)", "the models take 3", "--label-column")
    rows.write_text("age,chol,bmi,outcome\n0.1,0.2,0.3,1\n")
    refused(runner.invoke(app, ["predict", str(old), str(rows), "--client", "0"]), "4 columns")
    res = runner.invoke(app, ["predict", str(old), str(rows), "--client", "0", "--label-column", "outcome"])
    assert res.exit_code == 0, res.output
    assert "model inputs, in file order: age, chol, bmi" in res.output


def test_topofl_predict_refuses_a_named_site_column_the_file_lacks(tmp_path):
    data = tmp_path / "sites.csv"
    _write_sites_csv(data, np.random.default_rng(4))
    runner.invoke(app, ["run", "--data", str(data), "--method", "fedavg", "--rounds", "1",
                        "--save-models", str(tmp_path / "m")])
    models = str(tmp_path / "m" / "fedavg-seed0.npz")
    one_line_error(runner.invoke(app, ["predict", models, str(data), "--site-column", "hospital"]),
                   "no column 'hospital'", "--site-column")
    assert runner.invoke(app, ["predict", models, str(data)]).exit_code == 0   # the default: used where present


def test_input_shape_flag_is_checked():
    one_line_error(runner.invoke(app, ["run", "--input-shape", "1,x,8"]), "--input-shape")
    for text in ("1,,8,8", "1,8,8,", ",1,8"):
        one_line_error(runner.invoke(app, ["run", "--input-shape", text]), "--input-shape", repr(text))
    one_line_error(runner.invoke(app, ["run", "--input-shape", "1,8,8"]), "input_shape applies to a torch model")
    one_line_error(runner.invoke(app, ["run", "--model", "mlp", "--input-shape", "1,8,8"]),
                   "holds 64 values per row; the rows have 20 features")


# ---- torch: a user's module comes back as a module; a user's CNN runs with an input shape ------------------------
@pytest.mark.deep
def test_a_users_module_comes_back_as_a_module(tmp_path):
    torch = pytest.importorskip("torch")
    from helpers import make_mlp

    fed = topofl.make_scenario("healthcare", seed=0, n_clients=4, adversarial=(1,))
    net = make_mlp()
    h = topofl.simulate(fed, "fedavg", rounds=1, seed=0, model=net, local_epochs=1)
    mod = h.module(client=2)
    assert isinstance(mod, torch.nn.Sequential) and mod is not net
    X = fed[2].X_test
    with torch.no_grad():
        logits = mod(torch.tensor(X, dtype=torch.float32)).double()
    np.testing.assert_allclose(torch.softmax(logits, 1)[:, 1].numpy(), h.predict(X, client=2, preprocessed=True),
                               atol=1e-6)
    # its state_dict loads into a fresh module of the user's own class
    fresh = make_mlp()
    fresh.load_state_dict(h.state_dict(client=2))
    for a, b in zip(fresh.parameters(), mod.parameters(), strict=True):
        assert torch.equal(a, b)
    loaded = topofl.load_models(topofl.save_models(h, tmp_path / "mlp.npz"), model=make_mlp)
    for a, b in zip(loaded.module(2).parameters(), mod.parameters(), strict=True):
        assert torch.equal(a, b)
    assert isinstance(h.module(), torch.nn.Module)   # the server's model too
    with pytest.raises(ValueError, match="NumPy model, not a torch module"):
        topofl.simulate(fed, "fedavg", rounds=1, seed=0).module(0)


@pytest.mark.deep
def test_a_users_cnn_runs_with_an_input_shape(tmp_path):
    torch = pytest.importorskip("torch")
    from helpers import make_digit_cnn

    fed = topofl.make_scenario("digits", seed=0, n_clients=8)
    with pytest.raises(ValueError, match="does not fit this data"):
        topofl.simulate(fed, "fedavg", rounds=1, seed=0, model=make_digit_cnn)   # flat rows: conv2d refuses them
    h = topofl.simulate(fed, "fedavg", rounds=2, seed=0, model=make_digit_cnn, input_shape=(1, 8, 8), local_epochs=1)
    assert h.model.input_shape == (1, 8, 8) and np.isfinite(h.final["accuracy"])
    mod = h.module(client=1)
    assert type(mod).__name__ == "DigitCNN"
    X = fed[1].X_test
    with torch.no_grad():
        probs = torch.softmax(mod(torch.tensor(X, dtype=torch.float32).reshape(-1, 1, 8, 8)).double(), 1).numpy()
    np.testing.assert_allclose(probs, h.predict(X, client=1, preprocessed=True), atol=1e-6)
    loaded = topofl.load_models(topofl.save_models(h, tmp_path / "cnn.npz"), model=make_digit_cnn)
    np.testing.assert_array_equal(loaded.predict(X, client=1, preprocessed=True), h.predict(X, client=1, preprocessed=True))
    # peers too, and the command line
    p = topofl.simulate_decentralised(fed, "local-peers", rounds=1, seed=0, model=make_digit_cnn, input_shape=(1, 8, 8))
    assert p.models[0].input_shape == (1, 8, 8)
    res = runner.invoke(app, ["run", "--scenario", "digits", "-s", "n_clients=8", "--method", "fedavg", "--rounds", "1",
                              "--model", "helpers:make_digit_cnn", "--input-shape", "1,8,8", "-p", "local_epochs=1"])
    assert res.exit_code == 0, res.output


@pytest.mark.deep
def test_sheaf_with_models_of_different_architectures_saves_and_loads(tmp_path):
    pytest.importorskip("torch")
    from topofl.data.loaders.mnist10k import mnist_federation

    images = mnist_federation(3, partition_kind="iid", n_samples=300, seed=0, min_size=10)
    h = topofl.simulate_decentralised(images, "sheaf", rounds=1, seed=0, model="cnn-small,cnn-same,cnn-small",
                                      gamma=0.01)
    loaded = topofl.load_models(topofl.save_models(h, tmp_path / "het.npz"))
    assert loaded.manifest["client_model"]["1"]["name"] == "cnn-same"
    X = images[1].X_test[:5]
    np.testing.assert_array_equal(loaded.predict(X, client=1, preprocessed=True), h.predict(X, client=1, preprocessed=True))
    assert type(loaded.module(1)).__name__ == type(h.module(1)).__name__
