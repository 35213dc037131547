"""pTopoFL (paper §3, Algorithm 1): personalised FL guided by persistent homology.

Client: descriptor φ_k (§3.1), four TDA features or sample weights (§3.2), local training from its cluster's
model. Server: clustering by descriptor distance (§3.3), trust (§3.4, Eq. 8), per-cluster aggregation (Eq. 6,
a robust rule, or Eq. 12's Wasserstein weights), blending with the consensus (Eq. 7) and drift tracking (§3.5,
Eq. 9); optional DP of updates and of descriptors (§3.6). See
docs/internals.md#topofl.algorithms.ptopofl.algorithm for the steps, the options where the paper says two
things (docs/ptopofl-options.md) and the two DP channels.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

import numpy as np

from topofl.algorithms.base import (
    AGGREGATOR_HELP,
    AGGREGATORS,
    Algorithm,
    AlgorithmConfig,
    ClientContext,
    DPAggregateConfig,
    RobustRuleConfig,
    SecureAggConfig,
    UpdateReputation,
    cap_shares,
    dp_server_rng,
    hp,
    robust_entries,
    robust_round,
    round_change_stats,
    weighted_sum,
)
from topofl.algorithms.ptopofl import maths
from topofl.config import choice, floats, ints
from topofl.federation.messages import ClientUpdate, ServerMessage
from topofl.federation.secure_client import GroupSum, SecurePlan
from topofl.federation.validation import ArraySpec, ClientInfo, ReplySchema
from topofl.models.base import Model
from topofl.models.registry import is_deep, representation
from topofl.privacy import accounting
from topofl.privacy.dp import ChangeRows, descriptor_mechanism, dp_fedavg_aggregate, gaussian_sigma, privacy_report
from topofl.privacy.risk import PRIVACY_METRICS, client_privacy
from topofl.tda.barycentre import diagram_barycentre, distances_to_barycentre
from topofl.tda.descriptor import (
    LAYOUT,
    SCALINGS,
    descriptor,
    descriptor_from_diagrams,
    descriptor_problems,
    scale_points,
    subsample,
)
from topofl.tda.distances import condensed_descriptor_distances, normalise_rows, pairwise_diagram_distances
from topofl.tda.features import N_FEATURES, TopoContext, topological_sample_weights

CLUSTER_DISTANCES = ("l2", "wasserstein", "bottleneck")
INTRA_WEIGHTINGS = ("eq6", "wasserstein_exp")
TOPO_FEATURES = ("auto", "augment", "sample_weight", "off")
#: tag of the client-private generator of descriptor noise (distinct from the subsample's 0x70F0)
_DESCRIPTOR_NOISE_TAG = 0xD9D0
_H0_ENTROPY, _H1_ENTROPY = LAYOUT.index("h0_entropy"), LAYOUT.index("h1_entropy")


@dataclass(frozen=True)
class PTopoFLConfig(SecureAggConfig, DPAggregateConfig, RobustRuleConfig, AlgorithmConfig):
    """Hyper-parameters of pTopoFL; defaults are the paper's (Table 3) where it gives one."""

    n_clusters: int = hp(
        2, "number of topology clusters M (paper: 2 for scenarios A/B)",
        low=1, integer=True, space=ints(1, 4),
    )
    beta: float = hp(
        0.3, "inter-cluster blending β in [0, 1] (Eq. 7; 0 = pure cluster models, 1 = consensus)",
        low=0.0, high=1.0, space=floats(0.0, 1.0),
    )
    tau: float = hp(
        2.0, "anomaly z-score threshold τ: clients with z > τ are reported as flagged (paper: 2.0; 1.8 in robustness "
        "runs); it changes the models only with trust_gate='flagged'",
        low=0.0,
    )
    use_trust: bool = hp(True, "multiply aggregation weights by trust t_k (§3.4)", space=choice(True, False))
    trust_gate: str = hp(
        "all", "apply t_k = exp(-max(z-1,0)) to 'all' clients (§3.4 as written: τ then only decides which clients are "
        "reported as flagged, never the models) or only to 'flagged' ones, z > τ (τ <= 1 is then the same as 'all')",
        choices=("all", "flagged"),
    )
    trust_space: str = hp(
        "raw", "descriptors used for δ_k: 'raw' φ (Eq. 8) or 'normalised' φ̂ (authors' code)",
        choices=("raw", "normalised"),
    )
    cluster_distance: str = hp(
        "l2", "clustering distance: 'l2' on normalised φ (§3.3/reference code), 'wasserstein' or 'bottleneck' between "
        "diagrams (Fig. 1 text)",
        choices=CLUSTER_DISTANCES,
    )
    wasserstein_p: float = hp(2.0, "order p of the Wasserstein clustering distance (>= 1)", low=1.0)
    wasserstein_rel_error: float = hp(
        0.0, "Wasserstein clustering distance: 0 = exact (assignment solver); > 0 = Hera's approximation, within (1 + "
        "this) x exact",
        low=0.0,
    )
    augment: str = hp(
        "auto", "append the four per-sample TDA features to the local features (§3.2): auto (on for linear models, off "
        "for deep ones, whose input is an image the features cannot be appended to) | on | off",
        choices=("auto", "on", "off"),
    )
    n_sub: int = hp(
        0, "points subsampled per client for PH: 0 = auto (Table 3's 80 for linear models, §4.1's 200 for deep ones)",
        low=3, integer=True, also=(0,),
    )
    descriptor_space: str = hp(
        "auto", "what φ describes: data (the client's features, §3.1) | representation (penultimate-layer activations "
        "of the model the client holds, §4.1 C) | auto (representation for deep models, data otherwise)",
        choices=("auto", "data", "representation"),
    )
    n_thresholds: int = hp(
        20, "Betti-curve resolution L (Table 3: 20, giving a 48-d descriptor)",
        low=1, high=1000, integer=True,
    )
    descriptor_scale: str = hp(
        "none", "scaling before PH: none | standard (authors' code) | unit_box",
        choices=SCALINGS,
    )
    descriptor_every: int = hp(
        0, "recompute descriptors every N rounds with a fresh subsample (0: only when a client's data change)",
        low=0, integer=True,
    )
    drift_threshold: float = hp(
        0.1,
        "normalised drift Δ_k/‖φ_k^(1)‖ above which a client is re-clustered (Eq. 9); "
        "with descriptor_every > 0 subsample noise alone reaches ~0.2, use ~0.25", low=0.0, low_open=True,
    )
    recluster_on_drift: bool = hp(True, "re-assign drifted clients to their nearest cluster (§3.5)")
    drift_lr_boost: float = hp(
        1.0, "step-size multiplier for drifted clients (§3.5; 1 = off)",
        low=0.0, high=100.0, low_open=True,
    )
    alpha_c: float = hp(0.1, "compression factor α_c of the descriptor-risk proxy (Eq. 11)", low=0.0, high=1.0)
    intra_aggregator: str = hp(
        "mean", "rule aggregating each cluster's models: mean = Eq. 6's weighted average; the robust rules ignore "
        "Eq. 6's weights except multi_krum and norm_clip, which use them: " + AGGREGATOR_HELP,
        choices=AGGREGATORS,
    )
    descriptor_dp_radius: float = hp(
        0.0, "descriptor DP: radius B >= 0 of the ball φ is projected onto before the Gaussian mechanism, a public "
        "constant (0: descriptors sent as computed); needs cluster_distance='l2' (diagrams would leak)",
        low=0.0,
    )
    descriptor_dp_epsilon: float = hp(
        1.0, "descriptor DP: ε > 0 of each fresh descriptor release (δ = dp_delta; analytic Gaussian)",
        low=0.0, low_open=True,
    )
    # -- faithfulness options (docs/ptopofl-options.md); their defaults leave the results unchanged
    intra_weighting: str = hp(
        "eq6", "within-cluster weights: eq6 = n_k·exp(−‖φ̂_k − φ̂_C‖)·t_k (Eq. 6, Algorithm 1) | wasserstein_exp = "
        "exp(−λ·W_p(PD_k, PD̄)) normalised (§1, Eq. 12), PD̄ the W2 Fréchet mean of the cluster's diagrams (Turner et "
        "al. 2014); clients then send their diagrams",
        choices=INTRA_WEIGHTINGS, space=choice("eq6", "wasserstein_exp", tuned=False),
    )
    wasserstein_temperature: float = hp(
        1.0, "temperature λ > 0 of Eq. 12's weights, per unit of diagram distance (the paper gives no value)",
        low=0.0, high=1e6, low_open=True, space=floats(0.1, 10.0, log=True, tuned=False)
    )
    topo_features: str = hp(
        "auto", "§3.2 mechanism: augment (the text: four TDA features appended to the input) | sample_weight (the "
        "authors' paper-era code: per-sample weights exp(−‖x − x̄‖/A_0) of the local loss) | off | auto (follow "
        "augment)",
        choices=TOPO_FEATURES, space=choice("auto", "sample_weight", "off", tuned=False),
    )
    cluster_after: int = hp(
        0, "warm-up: rounds 1..N train one FedAvg-like group; clients then recompute φ on the model they receive and "
        "the first clustering happens in round N + 1 (0: at the first round, on the initial model)",
        low=0, integer=True,
    )
    recluster_every: int = hp(
        0, "every N rounds after a clustering, clients recompute φ on the model they receive and the server clusters "
        "again from scratch (0: never; §3.3 clusters once)",
        low=0, integer=True,
    )

    def __post_init__(self) -> None:
        if isinstance(self.augment, bool):  # True/False as earlier releases spelled it (before the bounds are checked)
            object.__setattr__(self, "augment", "on" if self.augment else "off")
        super().__post_init__()  # the declared bounds of every field; the rules joining fields follow
        self.check_dp_rule("intra_aggregator", self.intra_aggregator)
        self.check_secure_rule("intra_aggregator", self.intra_aggregator)
        clash = {"on": ("sample_weight", "off"), "off": ("augment", "sample_weight")}.get(self.augment, ())
        if self.topo_features in clash:
            raise ValueError(f"topo_features={self.topo_features!r} contradicts augment={self.augment!r}; "
                             "set one of them (augment='auto' defers to topo_features)")
        if self.intra_weighting == "wasserstein_exp" and self.dp_descriptors:
            raise ValueError("intra_weighting='wasserstein_exp' cannot be combined with descriptor_dp_radius > 0: "
                             "Eq. 12 needs the persistence diagrams, which would be sent without noise; "
                             "use intra_weighting='eq6'")
        if self.intra_weighting == "wasserstein_exp" and self.dp_updates:
            raise ValueError("intra_weighting='wasserstein_exp' has no effect with dp_noise_multiplier > 0: "
                             "DP-FedAvg aggregates with uniform weights; use intra_weighting='eq6'")
        if self.dp_descriptors and self.cluster_distance != "l2":
            raise ValueError(
                f"cluster_distance={self.cluster_distance!r} cannot be combined with "
                f"descriptor_dp_radius={self.descriptor_dp_radius!r}: a diagram distance needs the persistence "
                "diagrams, which would be sent without noise; use cluster_distance='l2'"
            )

    @property
    def dp_descriptors(self) -> bool:
        """Whether descriptors are released by the Gaussian mechanism (``descriptor_dp_radius`` > 0)."""
        return self.descriptor_dp_radius > 0

    def dp_descriptor_fields(self) -> tuple[float, float]:
        """``(descriptor_radius, descriptor_epsilon)`` of :class:`~topofl.privacy.dp.DPConfig`."""
        return self.descriptor_dp_radius, self.descriptor_dp_epsilon


def data_fingerprint(X: np.ndarray) -> str:
    """Cheap content hash of a client's training features (detects data changes; computed every
    round, so SHA-256, which CPUs with SHA extensions hash twice as fast as BLAKE2b).
    """
    # numpy's stubs declare ndarray.__buffer__ only for Python >= 3.12; an ndarray is a buffer on every version
    return hashlib.sha256(np.ascontiguousarray(X).view(np.uint8)).hexdigest()[:32] + str(X.shape)  # type: ignore[arg-type]


class PTopoFL(Algorithm):
    """Personalised topology-aware federated learning (paper Algorithm 1)."""

    client_state_recovery = (
        "it recomputes its descriptor from its data (the same subsample, unless descriptor_every > 0, whose "
        "schedule restarts) and sends it again; with descriptor DP its release count restarts, while the "
        "server's accountant counts every release it received"
    )

    name = "ptopofl"
    Config = PTopoFLConfig
    personalised = True
    config: PTopoFLConfig

    # ---- choices that depend on the model (linear or deep) ----------------------------------
    def topo_mode(self, deep: bool) -> str:
        """The §3.2 mechanism, resolved for the model: ``"augment"``, ``"sample_weight"`` or ``"off"``.

        ``topo_features="auto"`` follows ``augment`` (its own ``"auto"``: augment for linear
        models, off for deep ones, whose input is an image the features cannot be appended to).
        """
        a, t = self.config.augment, self.config.topo_features
        if a == "on" and deep:
            raise ValueError("augment='on' appends four TDA features to a deep model's input, an image; "
                             "use augment='auto' or 'off'")
        if t == "auto":
            return "augment" if a == "on" or (a == "auto" and not deep) else "off"
        if t == "augment" and deep:
            raise ValueError("topo_features='augment' appends four TDA features to a deep model's input, an image; "
                             "use topo_features='sample_weight' or 'off'")
        return t

    def augments(self, deep: bool) -> bool:
        """Whether clients append the §3.2 TDA features (``topo_features``/``augment``, resolved for the model)."""
        return self.topo_mode(deep) == "augment"

    @property
    def sends_diagrams(self) -> bool:
        """Whether clients send their persistence diagrams with φ: a diagram clustering distance, or Eq. 12's
        weights.
        """
        return self.config.cluster_distance != "l2" or self.config.intra_weighting == "wasserstein_exp"

    def subsample_size(self, deep: bool) -> int:
        """n_sub, resolved: Table 3's 80 for linear models, §4.1's 200 for deep ones."""
        return self.config.n_sub or (200 if deep else 80)

    def space(self, deep: bool) -> str:
        """``"data"`` or ``"representation"`` (``descriptor_space``, resolved for the model)."""
        s = self.config.descriptor_space
        return s if s != "auto" else ("representation" if deep else "data")

    def input_dim(self, n_features: int, deep: bool = False) -> int:
        return n_features + (N_FEATURES if self.augments(deep) else 0)

    # ================================ client side =============================================
    def ensure_descriptor(self, ctx: ClientContext, theta: np.ndarray | None = None, refresh: bool = False) -> None:
        """(Re)compute φ_k when the client's data changed or the schedule says so (§3.5).

        On the data (§3.1), or — for a deep model, by default — on the penultimate-layer
        activations of a subsample of ``n_sub`` training points under the model the client holds
        (``theta``, the model it received this round; §4.1 C). The paper does not say when a
        representation descriptor is recomputed: here, as for data descriptors, when the client's
        data change and every ``descriptor_every`` rounds (0: only at the client's first round),
        so the clusters are formed on the representation of the common initial model — random
        features of each client's data — and drift tracks the data, not the training, unless
        ``cluster_after``/``recluster_every`` ask for descriptors of the trained model (``refresh``).

        With ``descriptor_dp_radius`` > 0 (§3.6) the stored (and sent) φ is the Gaussian mechanism's
        release (:func:`~topofl.privacy.dp.descriptor_mechanism`), drawn from a generator of the
        client's own seed and a private tag — not the subsample's, which a server knowing the
        seeds could replay — fresh for every recomputation; ``ctx.state["dp_releases"]`` counts
        them. The diagrams stay on the client (its §3.2 features use them locally).

        ``refresh`` (the server's request before a clustering on trained models, ``cluster_after``
        / ``recluster_every``) recomputes φ once this round on the same subsample rows as the
        first descriptor, so that it moves with the model (a representation) and not with
        sampling noise. With ``topo_features="sample_weight"`` the §3.2 weights of the local
        loss are recomputed with φ, in the same space (:func:`~topofl.tda.features.topological_sample_weights`).
        """
        st, c = ctx.state, self.config
        deep = is_deep(ctx.model)
        X = ctx.data.X_train
        fp = data_fingerprint(X)
        due = c.descriptor_every > 0 and ctx.round - st.get("desc_round", ctx.round) >= c.descriptor_every
        refresh = refresh and st.get("desc_round") != ctx.round
        if st.get("fingerprint") == fp and not due and not refresh:
            return
        k = st.get("n_descriptors", 0)
        # A data change reuses the same subsample rows (so the descriptor moves with the data, not
        # with sampling noise); a scheduled recomputation draws a fresh subsample.
        draw = k if due else 0
        rng = np.random.default_rng(np.random.SeedSequence([ctx.seed, ctx.client_id, draw, 0x70F0]))
        n_sub = self.subsample_size(deep)
        if self.space(deep) == "representation":
            if theta is None:
                raise ValueError("a representation descriptor needs the model the client holds")
            Z = representation(ctx.model, theta, subsample(X, n_sub, rng))
            phi, dgms = descriptor(Z, Z.shape[0], c.n_thresholds, rng, c.descriptor_scale, return_diagrams=True)
        else:
            phi, dgms = descriptor(X, n_sub, c.n_thresholds, rng, c.descriptor_scale, return_diagrams=True)
        if c.dp_descriptors:
            noise = np.random.default_rng(np.random.SeedSequence([ctx.seed, ctx.client_id, k, _DESCRIPTOR_NOISE_TAG]))
            phi = descriptor_mechanism(phi, c.descriptor_dp_radius, c.descriptor_dp_epsilon, c.dp_delta, noise).phi
            st["dp_releases"] = st.get("dp_releases", 0) + 1
        st.update(fingerprint=fp, phi=phi, dgms=dgms, desc_round=ctx.round, n_descriptors=k + 1, desc_dirty=True)
        mode = self.topo_mode(deep)
        if mode == "augment":
            st["topo"] = TopoContext.from_data(X, dgms, min(X.shape[0], n_sub))
        elif mode == "sample_weight":
            points = (representation(ctx.model, theta, X) if theta is not None and self.space(deep) == "representation"
                      else X)
            st["sample_weight"] = topological_sample_weights(scale_points(points, c.descriptor_scale), dgms[0])

    def client_features(self, ctx: ClientContext, X: np.ndarray) -> np.ndarray:
        if not self.augments(is_deep(ctx.model)):
            return X
        self.ensure_descriptor(ctx)
        return self._augmented(ctx, X)

    @staticmethod
    def _augmented(ctx: ClientContext, X: np.ndarray) -> np.ndarray:
        """``X`` with the §3.2 TDA features of the client's current descriptor (ensured by the caller)."""
        augmented: np.ndarray = ctx.state["topo"].augment(X)
        return augmented

    def client_fit(self, ctx: ClientContext, message: ServerMessage) -> ClientUpdate:
        """The client step of Algorithm 1: φ_k (§3.1) when due, local training from the cluster model on the
        §3.2-augmented (or -weighted) data, then the model, n_k and — only when it changed — φ_k.
        """
        self.ensure_descriptor(ctx, message.params, refresh=bool(message.config.get("refresh_descriptor", False)))
        st = ctx.state
        X = self._augmented(ctx, ctx.data.X_train) if self.augments(is_deep(ctx.model)) else ctx.data.X_train
        theta = self.local_sgd(ctx, message.params, X, lr_scale=float(message.config.get("lr_scale", 1.0)),
                               sample_weight=st.get("sample_weight"))
        send = bool(st.pop("desc_dirty", False) or message.config.get("need_descriptor", False))
        extras = {}
        if send and self.sends_diagrams:  # never with descriptor DP (the config refuses it)
            extras = {f"dgm{j}": d for j, d in enumerate(st["dgms"])}
        n, d = ctx.data.X_train.shape
        metrics = client_privacy(n, d, theta.size, st["phi"].size, self.config.alpha_c)
        return ClientUpdate(ctx.client_id, theta, n, descriptor=st["phi"] if send else None, metrics=metrics,
                            extras=extras)

    # ================================ server side =============================================
    def descriptor_size(self) -> int:
        """8 scalars + two Betti curves of ``n_thresholds`` points (48 with the paper's L = 20)."""
        return 8 + 2 * self.config.n_thresholds

    def reply_schema(self, client_id: int, message: ServerMessage, info: ClientInfo) -> ReplySchema:
        """The model (near the cluster model sent), the descriptor — required when the server
        asked for it, checked against the invariants of a PH descriptor of ``min(n_k, n_sub)``
        points (with descriptor DP only its shape and finiteness: a noisy φ has none of those
        invariants) — the diagrams when clustering by a diagram distance, and the privacy metrics.
        """
        c = self.config
        check = None if c.dp_descriptors else partial(
            descriptor_problems, n_thresholds=c.n_thresholds,
            n_points=min(info.n_train, self.subsample_size(is_deep(self.model))))
        dgm = ArraySpec((None, 2), required=False, low=0.0)
        return ReplySchema(
            self.params_spec(self.update_size()),
            centers=message.params[None, :],
            extras={"dgm0": dgm, "dgm1": dgm} if self.sends_diagrams else {},
            descriptor=ArraySpec((self.descriptor_size(),),
                                 required=bool(message.config.get("need_descriptor", False))),
            descriptor_check=check,
            metrics={k: (0.0, float("inf")) for k in PRIVACY_METRICS},
        )

    def reply_problem(self, update: ClientUpdate, message: ServerMessage, info: ClientInfo) -> str | None:
        """With a diagram distance (or Eq. 12's weights), the descriptor must be the one of the diagrams sent
        beside it.
        """
        if not self.sends_diagrams:
            return None
        dgms = [update.extras.get(k) for k in ("dgm0", "dgm1")]
        if update.descriptor is None:
            return "diagrams sent without a descriptor" if any(d is not None for d in dgms) else None
        if any(d is None for d in dgms):
            c = self.config
            why = (f"cluster_distance={c.cluster_distance!r}" if c.cluster_distance != "l2"
                   else f"intra_weighting={c.intra_weighting!r}")
            return f"{why} needs the diagrams dgm0 and dgm1 with the descriptor"
        present = cast("list[np.ndarray]", dgms)  # no None left: checked just above
        if any(np.any(d[:, 1] <= d[:, 0]) for d in present):
            return "diagram pairs must die after they are born"
        if not np.allclose(descriptor_from_diagrams(present, self.config.n_thresholds), update.descriptor,
                           rtol=1e-9, atol=1e-12):
            return "the descriptor does not match the diagrams sent with it"
        return None

    def setup(self, model: Model, client_ids: list[int], rng: np.random.Generator) -> None:
        super().setup(model, client_ids, rng)
        if self.config.n_clusters > len(client_ids):
            raise ValueError(f"n_clusters={self.config.n_clusters} exceeds the number of clients ({len(client_ids)})")
        self.init_params = model.init(rng)
        self.labels: dict[int, int] = {}
        self.labels_version = 0  # counts changes of the labels (keys of the cluster sizes and consensus kept)
        self._sizes_memo: tuple[int, dict[int, int]] | None = None
        self._consensus_memo: tuple[int, tuple[tuple[int, np.ndarray], ...], np.ndarray] | None = None
        self.cluster_raw: dict[int, np.ndarray] = {}
        self.cluster_models: dict[int, np.ndarray] = {}
        self.phi: dict[int, np.ndarray] = {}
        self.phi_version = 0  # counts changes of the descriptors held (keys of the cached trust)
        self._anomaly: tuple[int, list[int], np.ndarray] | None = None  # (phi_version, ids, z) of the last trust
        self.dgms: dict[int, list[np.ndarray]] = {}
        self.history: dict[int, list[np.ndarray]] = {}
        self.trust: dict[int, float] = {}
        self.boosted: set[int] = set()
        self.sent: dict[int, np.ndarray] = {}  # the model each client was last sent (norm clipping's reference)
        self.warned: set[str] = set()  # robust aggregation's fallback notes already logged as warnings
        self.reputation = UpdateReputation()  # guarded_mean: each client's cosines so far
        # DP: the server's own noise generator (spawned only for DP runs) and the distinct descriptors received
        # per client
        self._dp_rng = dp_server_rng(rng) if self.config.dp_updates else None
        self.descriptor_releases: dict[int, int] = {}
        self.clustered_round = 0  # the round of the latest (re-)clustering (cluster_after, recluster_every)
        self.dgm_version: dict[int, int] = {}  # diagrams received per client (keys of the barycentre cache)
        self.barycentres: dict[tuple[tuple[int, int], ...], list[np.ndarray]] = {}  # Eq. 12's PD̄ per group of diagrams
        self.barycentres_used: dict[tuple[tuple[int, int], ...], list[np.ndarray]] = {}  # those this round used

    def __setstate__(self, state: dict[str, Any]) -> None:
        """A server checkpointed by an earlier release (:mod:`topofl.flower.checkpoint`) lacks the trust cache:
        it starts empty.
        """
        for name, value in (("phi_version", 0), ("_anomaly", None), ("labels_version", 0), ("_sizes_memo", None),
                            ("_consensus_memo", None)):
            state.setdefault(name, value)
        self.__dict__.update(state)

    def _params_for(self, cid: int) -> np.ndarray:
        if cid in self.labels:
            return self.cluster_models[self.labels[cid]]
        if self.cluster_models:  # a client not yet assigned gets the consensus model
            return self._consensus()
        return self.init_params

    def _consensus(self) -> np.ndarray:
        """θ̄ = Σ_j |C_j|/K θ_Cj of the raw cluster models (Eq. 7), computed once for as long as the labels and the
        cluster models stay the same (every unassigned client's message and evaluation shares it).
        """
        raw = tuple(self.cluster_raw.items())  # the memo holds these arrays, so their identities stay unique
        memo = self._consensus_memo
        if memo is None or memo[0] != self.labels_version or len(memo[1]) != len(raw) or any(
                j != k or a is not b for (j, a), (k, b) in zip(memo[1], raw, strict=True)):
            memo = (self.labels_version, raw, maths.consensus(self.cluster_raw, self._sizes()))
            self._consensus_memo = memo
        return memo[2]

    def configure_fit(self, rnd: int, selected: list[int]) -> dict[int, ServerMessage]:
        boost = self.config.drift_lr_boost
        refresh = {"refresh_descriptor": True} if self._refresh_due(rnd) else {}
        messages = {
            cid: ServerMessage(
                self._params_for(cid),
                config={"lr_scale": boost if cid in self.boosted else 1.0,
                        "need_descriptor": bool(refresh) or cid not in self.phi, **refresh},
            )
            for cid in selected
        }
        self.sent.update({cid: m.params for cid, m in messages.items()})
        return messages

    def server_params(self) -> np.ndarray:
        """The consensus θ̄ = Σ_j |C_j|/K θ_Cj of the cluster models (Eq. 7), the model a new client gets."""
        return self._params_for(-1)

    def client_feature_state(self, ctx: ClientContext) -> dict[str, np.ndarray]:
        """With the §3.2 augmentation, the client's centroid, scale and TDA statistics (its model's
        input is ``[X, TDA features of X]``).
        """
        if not self.augments(is_deep(ctx.model)):
            return {}
        self.ensure_descriptor(ctx)
        topo = ctx.state["topo"]
        return {"centroid": topo.centroid, "scale": np.array([topo.scale]), "client_stats": topo.client_stats}

    def message_for(self, client_id: int) -> ServerMessage:
        return ServerMessage(self._params_for(client_id))

    def _sizes(self) -> dict[int, int]:
        """|C_j| of every cluster, counted once per change of the labels."""
        if self._sizes_memo is None or self._sizes_memo[0] != self.labels_version:
            sizes: dict[int, int] = {}
            for lab in self.labels.values():
                sizes[lab] = sizes.get(lab, 0) + 1
            self._sizes_memo = (self.labels_version, sizes)
        return dict(self._sizes_memo[1])

    def _refresh_due(self, rnd: int) -> bool:
        """Whether round ``rnd`` clusters on descriptors the clients recompute on the model they
        receive: the first clustering after a ``cluster_after`` warm-up (every round from
        ``cluster_after + 1`` until it happens), then every ``recluster_every`` rounds.
        """
        c = self.config
        if not self.labels:
            return c.cluster_after > 0 and rnd > c.cluster_after
        return c.recluster_every > 0 and rnd - self.clustered_round >= c.recluster_every

    def _cluster_all(self, rnd: int, fresh: bool = False) -> None:
        """Clustering of every client with a descriptor (§3.3 Step 1): at the first round with M
        descriptors (and past the ``cluster_after`` warm-up), and again every ``recluster_every``
        rounds. The first clustering starts every cluster from the model the clients were sent
        (after a warm-up, the warm-up's model); a re-clustering starts each new cluster from the
        mean of its members' previous cluster models (the consensus if none had one). On
        ``fresh`` descriptors (requested by :meth:`_refresh_due`) the drift history (Eq. 9)
        restarts from them: φ moved with the model, not with the data.
        """
        ids = sorted(self.phi)
        c = self.config
        if c.n_clusters > len(ids):
            raise ValueError(f"n_clusters={c.n_clusters} exceeds the number of clients ({len(ids)})")
        if c.cluster_distance == "l2":  # condensed, a block of rows at a time: never the K × K matrix
            labels = maths.cluster_condensed(condensed_descriptor_distances(np.vstack([self.phi[i] for i in ids])),
                                             len(ids), c.n_clusters)
        else:
            labels = maths.cluster_clients(pairwise_diagram_distances(
                [self.dgms[i] for i in ids], c.cluster_distance, c.wasserstein_p, c.wasserstein_rel_error),
                c.n_clusters)
        old_labels, old_raw, consensus = self.labels, self.cluster_raw, (self.server_params() if self.labels else None)
        self.labels = dict(zip(ids, labels.tolist(), strict=True))
        self.labels_version += 1
        self.clustered_round = rnd
        if not old_labels:
            self.cluster_raw = {j: self.init_params.copy() for j in set(self.labels.values())}
        else:
            starts: dict[int, list[np.ndarray]] = {j: [] for j in set(self.labels.values())}
            for cid, j in self.labels.items():
                if cid in old_labels:
                    starts[j].append(old_raw[old_labels[cid]])
            self.cluster_raw = {j: np.mean(v, axis=0) if v else cast(np.ndarray, consensus).copy()
                                for j, v in starts.items()}
        if fresh:
            self.history = {cid: [phi] for cid, phi in self.phi.items()}

    def _provisional(self, rnd: int, updates: list[ClientUpdate]) -> dict[str, Any]:
        """Before M clients have sent descriptors (partial participation, dropped replies) the
        round-0 clustering of §3.3 cannot run: the participants are aggregated as one group with
        Eq. 6's weights (or ``intra_aggregator``) into the model every client starts from, and
        clustering waits.
        """
        robust: dict[str, Any] = {}
        self.trust, z, flagged = self._trust()
        members = [u for u in updates if u.client_id in self.phi]
        distances: dict[int, float] = {}
        if self.config.dp_updates:  # one group of all the run's clients, released every round
            self.init_params = self._dp_aggregate(members, self.init_params, len(self.client_ids), robust)
        elif members:
            w = self._weights(members, sorted(u.client_id for u in members), None, distances)
            self.init_params = self._aggregate(members, w, robust, "all", members)
        return {**self._waiting_log(rnd, z, flagged), **self._weights_log(distances), **self._robust_log(robust),
                **self._dp_log(rnd, robust)}

    def _waiting(self, rnd: int) -> bool:
        """Whether round ``rnd`` aggregates provisionally (:meth:`_provisional`): no clustering yet and too few
        descriptors, or the ``cluster_after`` warm-up.
        """
        c = self.config
        return not self.labels and (len(self.phi) < c.n_clusters or rnd <= c.cluster_after)

    def _waiting_log(self, rnd: int, z: dict[int, float], flagged: list[int]) -> dict[str, Any]:
        c = self.config
        waiting = (f"{len(self.phi)} descriptor(s) < n_clusters={c.n_clusters}: clustering waits"
                   if len(self.phi) < c.n_clusters
                   else f"warm-up round {rnd} of cluster_after={c.cluster_after}: clustering waits")
        return {"clusters": {}, "trust": self.trust, "z": z, "flagged": flagged, "drift": {}, "reclustered": [],
                "waiting": waiting}

    def _weights(self, members: list[ClientUpdate], group: list[int], centroid: np.ndarray | None,
                 distances: dict[int, float]) -> np.ndarray:
        """Aggregation weights of one group's participating ``members``, capped by ``max_client_weight``.

        ``intra_weighting="eq6"``: n_k · exp(−‖φ̂_k − φ̂_C‖) · t_k (Eq. 6) with φ̂_C = ``centroid``
        (the cluster's centroid; ``None``: the members' mean). ``"wasserstein_exp"``:
        exp(−λ W_p(PD_k, PD̄)) normalised (Eq. 12), PD̄ the Fréchet mean of the diagrams of the
        clients in ``group`` (the whole cluster, participants or not), cached while they stay the
        same; each member's W_p is recorded in ``distances``.
        """
        c = self.config
        if c.intra_weighting == "wasserstein_exp":
            key = tuple((cid, self.dgm_version[cid]) for cid in group)
            bary = self.barycentres.get(key)
            if bary is None:
                bary = diagram_barycentre([self.dgms[cid] for cid in group])
            self.barycentres_used[key] = bary
            W = distances_to_barycentre([self.dgms[u.client_id] for u in members], bary, c.wasserstein_p,
                                        c.wasserstein_rel_error)
            distances.update({u.client_id: float(d) for u, d in zip(members, W, strict=True)})
            w = maths.wasserstein_weights(W, c.wasserstein_temperature)
        else:
            phi_hat = normalise_rows(np.vstack([self.phi[u.client_id] for u in members]))
            w = maths.intra_cluster_weights(
                np.array([u.n_examples for u in members], float), phi_hat,
                phi_hat.mean(axis=0) if centroid is None else centroid,
                np.array([self.trust[u.client_id] for u in members]),
            )
        if c.max_client_weight < 1.0:
            w = cap_shares(w, c.max_client_weight)
        return w

    def _weights_log(self, distances: dict[int, float]) -> dict[str, Any]:
        """With Eq. 12's weights, the round's W_p(PD_k, PD̄) per participant (``barycentre_distance``); nothing
        otherwise.
        """
        if self.config.intra_weighting != "wasserstein_exp":
            return {}
        self.barycentres, self.barycentres_used = self.barycentres_used, {}  # keep the barycentres this round used
        return {"barycentre_distance": {int(k): v for k, v in sorted(distances.items())}}

    def _aggregate(self, members: list[ClientUpdate], w: np.ndarray, robust: dict[str, Any], group: str,
                   everyone: list[ClientUpdate]) -> np.ndarray:
        """One group's model from its members' models with weights ``w`` (Eq. 6): their weighted
        average (``intra_aggregator="mean"``), or the robust rule it names; the clients a rule
        leaves out, flags or clips and any fallback note are collected in ``robust`` for the round's log.

        ``guarded_mean`` checks every cluster against the median change and norm of the round's valid
        replies, ``everyone`` (each change from the model its client was sent): hostile clients that
        are a minority of the round can be half of a small cluster.
        """
        rule = self.config.intra_aggregator
        if rule == "mean":
            # as FedAvg's mean: one stacked product up to the stacking limit (every linear model: the bits of
            # before), summed in place a block at a time above it (no stack of a cluster's deep-model replies)
            return weighted_sum([u.params for u in members], w)
        reference = stats = None
        if rule in ("norm_clip", "guarded_mean"):
            reference = np.vstack([self.sent[u.client_id] for u in members])  # recorded by configure_fit
        if rule == "guarded_mean":
            if "_round_change" not in robust:
                robust["_round_change"] = round_change_stats(
                    [np.asarray(u.params, dtype=np.float64) - self.sent[u.client_id] for u in everyone])
            stats = robust["_round_change"]
        ids = [u.client_id for u in members]
        result, note = robust_round(rule, [u.params for u in members], w, reference, self.config, self.warned,
                                    direction=stats[0] if stats else None,
                                    norm_scale=stats[1] if stats else None, client_ids=ids, reputation=self.reputation)
        for key, value in robust_entries(ids, result, rule, None).items():
            robust.setdefault(key, []).extend(value)
        if note is not None:
            robust.setdefault("aggregation_fallback", {})[group] = note
        return result.vector

    def _dp_aggregate(self, members: list[ClientUpdate], base: np.ndarray, size: int,
                      robust: dict[str, Any]) -> np.ndarray:
        """One group's model under DP-FedAvg (McMahan et al. 2018, Algorithm 1, fixed denominator):
        ``base`` + (Σ_k clip(θ_k − θ_sent,k, C) + N(0, (zC)² I)) / ``size``, with θ_sent,k the
        model client k was sent (recorded by :meth:`configure_fit`), uniform weights and ``size``
        the group's number of clients (from the cluster labels, not from who replied). The ids of
        clipped clients are collected in ``robust["dp_clipped"]``.
        """
        c = self.config
        assert self._dp_rng is not None, "setup() first"
        deltas = ChangeRows([u.params for u in members], [self.sent[u.client_id] for u in members], base.size)
        agg = dp_fedavg_aggregate(deltas, c.dp_clip, c.dp_noise_multiplier, self._dp_rng, float(size))
        robust.setdefault("dp_clipped", []).extend(int(members[i].client_id) for i in agg.clipped)
        out: np.ndarray = base + agg.update
        return out

    def _dp_log(self, rnd: int, robust: dict[str, Any]) -> dict[str, Any]:
        """The round's privacy entries: :func:`~topofl.privacy.dp.privacy_report` after ``rnd``
        rounds (every round up to this one counts as an update release, including any the round
        loop skipped: the skip depends on who replied) and ``dp_descriptor_releases`` fresh
        descriptors — the most any one client has sent: the server counts, per client, the
        descriptors it received that differ from the one it holds (a cached noisy φ sent again
        is identical and costs nothing; a fresh release differs with probability 1). With
        descriptor DP alone (no update noise) only ``dp_epsilon_descriptor`` is reported: the
        models are then released without noise and have no finite ε.
        """
        c = self.config
        out: dict[str, Any] = {}
        releases = max(self.descriptor_releases.values(), default=0)
        dp = c.dp
        if dp is not None:
            out.update(privacy_report(dp, rnd, releases if c.dp_descriptors else 0))
            out["dp_clipped"] = sorted(robust.get("dp_clipped", []))
        elif c.dp_descriptors and releases > 0:
            s = gaussian_sigma(1.0, c.descriptor_dp_epsilon, c.dp_delta)
            out.update(dp_epsilon_descriptor=accounting.gaussian_epsilon(s, c.dp_delta, releases, c.dp_accountant),
                       dp_delta=c.dp_delta)
        if c.dp_descriptors:
            out["dp_descriptor_releases"] = releases
        return out

    @staticmethod
    def _robust_log(robust: dict[str, Any]) -> dict[str, Any]:
        """The round-log entries of :meth:`_aggregate`: ``excluded`` (sorted, when any) and the notes."""
        out: dict[str, Any] = {"excluded": sorted(robust["excluded"])} if robust.get("excluded") else {}
        for key in ("update_flagged", "clipped"):  # guarded_mean: reported every round, empty or not
            if key in robust:
                out[key] = sorted(robust[key])
        if "aggregation_fallback" in robust:
            out["aggregation_fallback"] = robust["aggregation_fallback"]
        return out

    def _track_drift(self) -> tuple[dict[int, float], list[int]]:
        """Eq. 9 per client, normalised by ‖φ^(1)‖; re-assign drifted clients (§3.5, :func:`maths.reassign`)."""
        c = self.config
        drift = {}
        self.boosted = set()
        for cid, hist in self.history.items():
            first = np.linalg.norm(hist[0])
            drift[cid] = maths.drift(np.vstack(hist)) / first if first > 0 else 0.0
            if drift[cid] > c.drift_threshold:
                self.boosted.add(cid)
        moved: list[int] = []
        if self.boosted and c.recluster_on_drift and len(self.cluster_raw) > 1:
            moved = maths.reassign(self.phi, self.labels, [cid for cid in self.history if cid in self.boosted])
            if moved:
                self.labels_version += 1
        return drift, moved

    def _trust(self) -> tuple[dict[int, float], dict[int, float], list[int]]:
        """Trust t_k, anomaly z-scores and flagged clients from the descriptors (§3.4, Eq. 8), per client id.

        The z-scores (O(K²) distances) are computed again only when the descriptors changed since the
        last computation (:attr:`phi_version`): in most rounds no client sends a new φ.
        """
        if self._anomaly is None or self._anomaly[0] != self.phi_version:
            ids = sorted(self.phi)
            Phi = np.vstack([self.phi[i] for i in ids])
            if self.config.trust_space == "normalised":
                Phi = normalise_rows(Phi)
            self._anomaly = (self.phi_version, ids, maths.anomaly_scores(Phi)[1])
        _, ids, z = self._anomaly
        t, flagged = maths.trust_from_z(z, self.config.tau, self.config.trust_gate)
        if not self.config.use_trust:
            t = np.ones_like(t)
        return (
            dict(zip(ids, t.tolist(), strict=True)),
            dict(zip(ids, z.tolist(), strict=True)),
            [i for i, f in zip(ids, flagged, strict=True) if f],
        )

    def _receive_descriptors(self, updates: list[ClientUpdate]) -> None:
        """Keep each reply's descriptor φ_k (and its diagrams), counting a DP release per new descriptor;
        then append every client's latest φ to its signature history.
        """
        for u in updates:
            if u.descriptor is not None:
                new = np.asarray(u.descriptor, dtype=np.float64)
                if not (u.client_id in self.phi and np.array_equal(self.phi[u.client_id], new)):
                    self.phi_version += 1  # the descriptors' K × K work (trust) is redone
                    if self.config.dp_descriptors:
                        self.descriptor_releases[u.client_id] = self.descriptor_releases.get(u.client_id, 0) + 1
                self.phi[u.client_id] = new
                if u.extras:
                    self.dgms[u.client_id] = [np.asarray(u.extras[k]) for k in sorted(u.extras)]
                    self.dgm_version[u.client_id] = self.dgm_version.get(u.client_id, 0) + 1
        for cid, phi in self.phi.items():  # signature tracking: φ_k^(r) ← φ_k (Algorithm 1)
            self.history.setdefault(cid, []).append(phi)

    def _aggregate_clusters(self, updates: list[ClientUpdate], centroids: dict[int, np.ndarray],
                            robust: dict[str, Any], distances: dict[int, float]) -> None:
        """Each cluster's raw aggregate ``cluster_raw[j]``: DP-FedAvg for every cluster, participants or not;
        otherwise Eq. 6 / Eq. 12's weights and the intra-cluster rule over the cluster's participants.
        """
        sizes = self._sizes()
        for j in sorted(set(self.labels.values())):
            members = [u for u in updates if self.labels.get(u.client_id) == j]
            if self.config.dp_updates:  # every cluster, participants or not: one release per client per round
                self.cluster_raw[j] = self._dp_aggregate(members, self.cluster_models.get(j, self.init_params),
                                                         sizes[j], robust)
                continue
            if not members:
                continue
            group = sorted(cid for cid, lab in self.labels.items() if lab == j and cid in self.dgms)
            w = self._weights(members, group, centroids[j], distances)
            self.cluster_raw[j] = self._aggregate(members, w, robust, str(j), updates)

    def aggregate_fit(self, rnd: int, updates: list[ClientUpdate]) -> dict[str, Any]:
        """The server step of Algorithm 1: clustering (§3.3), drift and re-assignment (§3.5, Eq. 9), trust
        (§3.4, Eq. 8), each cluster's aggregate (Eq. 6, Eq. 12, a robust rule or DP-FedAvg) and the blend (Eq. 7).
        """
        self._receive_descriptors(updates)
        if self._waiting(rnd):
            return self._provisional(rnd, updates)
        round_log, centroids = self._cluster_round(rnd)
        robust: dict[str, Any] = {}
        distances: dict[int, float] = {}
        self._aggregate_clusters(updates, centroids, robust, distances)
        self.cluster_models = maths.blend(self.cluster_raw, self._sizes(), self.config.beta)
        return {**round_log, **self._weights_log(distances), **self._robust_log(robust), **self._dp_log(rnd, robust)}

    def _cluster_round(self, rnd: int) -> tuple[dict[str, Any], dict[int, np.ndarray]]:
        """The round's clustering (§3.3), drift and re-assignment (§3.5, Eq. 9) and trust (§3.4, Eq. 8), from the
        descriptors received: the round log's entries and each cluster's centroid.
        """
        fresh = self._refresh_due(rnd)  # as configure_fit decided for this round
        if not self.labels or fresh:
            self._cluster_all(rnd, fresh)
        new = [cid for cid in self.phi if cid not in self.labels]
        if new:
            maths.assign_in_turn(self.phi, self.labels, new)
            self.labels_version += 1
        drift, moved = self._track_drift()
        self.trust, z, flagged = self._trust()
        centroids = maths.cluster_centroids(self.phi, self.labels)
        return {
            "clusters": {int(k): int(v) for k, v in self.labels.items()},
            "trust": self.trust,
            "z": z,
            "flagged": flagged,
            "drift": drift,
            "reclustered": moved,
            "signature": {
                int(k): [float(v[_H0_ENTROPY]), float(v[_H1_ENTROPY])] for k, v in self.phi.items()
            },  # (h0_entropy, h1_entropy) of each client's latest descriptor (§3.5, Fig. 5)
            **({"reclustered_all": True} if fresh else {}),
        }, centroids

    # ---- secure aggregation (topofl.federation.secure) ----------------------------------------
    def secure_plan(self, rnd: int, updates: list[ClientUpdate]) -> SecurePlan:
        """The server step of Algorithm 1 up to the weights, from what the clients sent besides their
        models (descriptors, sizes): clustering, drift, trust, and each cluster's Eq. 6 (or Eq. 12)
        weights — one secure sum per cluster. Each cluster's weights are scaled to sum to its number of
        participants (they are normalised within a group anyway, and so keep each cluster's mass in a merged group).

        A cluster with fewer than ``secure_min_group`` participants cannot hide its members
        (``secure_small_groups``): ``merge`` sums it with the cluster of nearest centroid (both clusters
        then take the merged group's mean as their aggregate this round; labels are unchanged), repeated
        until every group is large enough or one is left; ``exclude`` leaves it out this round (its
        model stays). The log's ``secure_groups`` lists each group's clusters.
        """
        self._receive_descriptors(updates)
        c = self.config
        distances: dict[int, float] = {}
        if self._waiting(rnd):   # the provisional group of every participant with a descriptor
            self.trust, z, flagged = self._trust()
            members = [u for u in updates if u.client_id in self.phi]
            groups: dict[int, dict[int, float]] = {}
            if members:
                w = self._weights(members, sorted(u.client_id for u in members), None, distances)
                groups[0] = {u.client_id: float(x) for u, x in zip(members, w, strict=True)}
            return SecurePlan(groups, {**self._waiting_log(rnd, z, flagged), **self._weights_log(distances)},
                              {"provisional": True, "clusters": {0: [0]} if groups else {}})
        round_log, centroids = self._cluster_round(rnd)
        weights: dict[int, dict[int, float]] = {}
        for j in sorted(set(self.labels.values())):
            members = [u for u in updates if self.labels.get(u.client_id) == j]
            if not members:
                continue
            group = sorted(cid for cid, lab in self.labels.items() if lab == j and cid in self.dgms)
            w = self._weights(members, group, centroids[j], distances)
            w = w * (len(members) / float(np.sum(w)))
            weights[j] = {u.client_id: float(x) for u, x in zip(members, w, strict=True)}
        clusters, policy = maths.small_groups(
            {j: len(v) for j, v in weights.items()}, centroids, c.secure_min_group, c.secure_small_groups)
        groups = {g: {cid: x for j in js for cid, x in weights[j].items()} for g, js in clusters.items()}
        log = {**round_log, **self._weights_log(distances), "secure_groups": {int(g): js for g, js in clusters.items()},
               **policy}
        return SecurePlan(groups, log, {"provisional": False, "clusters": clusters})

    def secure_aggregate(self, rnd: int, plan: SecurePlan, sums: dict[int, GroupSum]) -> dict[str, Any]:
        """Each summed group's mean Σ w_k θ_k / Σ w_k (the survivors') becomes the aggregate of its clusters
        (Eq. 6, as in the clear to quantisation error), then the blend (Eq. 7); before the first clustering,
        the provisional model. A group that was abandoned or excluded leaves its clusters' models as they were.
        """
        for g, clusters in plan.context["clusters"].items():
            if g not in sums:
                continue
            if plan.context["provisional"]:
                self.init_params = sums[g].mean
            else:
                for j in clusters:
                    self.cluster_raw[j] = sums[g].mean
        if not plan.context["provisional"]:
            self.cluster_models = maths.blend(self.cluster_raw, self._sizes(), self.config.beta)
        return dict(plan.log)
