"""A relay ServerApp for decentralised methods (issue 5; Sheaf-FMTL paper §3: no server).

The relay forwards each node's payloads to its graph neighbours and never aggregates; it sees the
projections but never the data, the models or the restriction maps. A failed node is dropped and its
edges' coupling terms become zero (Eqs. 27–28). See docs/internals.md#topofl.flower.relay.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any, cast

import numpy as np
from flwr.app import MessageType, RecordDict
from flwr.serverapp import Grid

from topofl.decentralised import make_graph
from topofl.decentralised.runner import _divergence_error, summarise_peers
from topofl.federation.history import Result, RoundSummary
from topofl.federation.pool import Failure
from topofl.federation.validation import ArraySpec
from topofl.flower.discovery import discover, new_run_id, reconcile
from topofl.flower.exchange import exchange
from topofl.flower.outputs import (
    RELAY_CURVE_FIELDS,
    RELAY_RECORD_FIELDS,
    RunOutputs,
    resolve_run_dir,
    results_root,
    run_status,
)
from topofl.flower.peer import peer_algorithm, peer_model
from topofl.flower.records import arrays_record, config_record, record_arrays
from topofl.flower.settings import FlowerSettings
from topofl.limits import MAX_REPLY_FREE_VALUES

log = logging.getLogger(__name__)

BITS_PER_FLOAT = 32


def _decode_step(content: RecordDict, expect: Mapping[str, ArraySpec] | None = None,
                 free_values: int = MAX_REPLY_FREE_VALUES) -> dict[str, Any]:
    """A node's reply: its report and outbox; with ``expect`` (neighbour → spec) an outbox
    addressed elsewhere or larger than the spec is refused before it is decoded.
    """
    report = dict(content["report"])
    meta: Mapping[str, Any] = content["meta"]  # the sender's record: int() refuses a bad client id
    return {"client": int(meta["client"]), "report": report,
            "outbox": {int(j): v for j, v in record_arrays(content, "outbox", required=False, expect=expect,
                                                                     free_values=free_values).items()}}


class Relay:
    """State of one relayed run: who is alive, what each node sent last, bits."""

    def __init__(self, grid: Grid, settings: FlowerSettings, run_dir: Any = None) -> None:
        self.grid, self.settings, self.run_dir = grid, settings, run_dir
        self.algorithm = peer_algorithm(settings.node_config()["method"], settings.node_config()["hyperparameters"])
        nodes, infos, self.failures = discover(grid, settings)
        # feature counts may differ (Sheaf-FMTL)
        self.task, self.n_classes, _, left_out = reconcile(nodes, infos, settings, shared_features=False)
        self.failures.extend(left_out)
        self.clients = sorted(nodes)  # graph node k = k-th client (node k = client k in process)
        self.flwr_node = {k: nodes[cid] for k, cid in enumerate(self.clients)}
        l2 = self.algorithm.config.l2
        self.dims = {k: peer_model(self.task, int(infos[cid]["n_features"]), self.n_classes, l2,
                                   settings.job.model).n_params
                     for k, cid in enumerate(self.clients)}
        self.graph = make_graph(settings.job.graph, len(self.clients), seed=settings.job.seed,
                                **dict(settings.job.graph_params))
        rng = np.random.default_rng(np.random.SeedSequence([int(settings.job.seed), 0xDEC]))  # as run_decentralised
        self.specs = self.algorithm.node_specs(self.dims, self.graph, rng)
        self.job = {**settings.node_config(), "task": self.task, "n_classes": self.n_classes,
                    "n_nodes": len(self.clients)}
        self.alive = set(self.flwr_node)
        self.sizes: dict[tuple[int, int, str], int] = {}
        self.bits = 0

    # ---- one exchange ----------------------------------------------------------------------
    def _send(self, rnd: int, stage: str, message_type: str,
              contents: dict[int, RecordDict]) -> dict[int, dict[str, Any]]:
        """Send to graph nodes ``contents``' keys; failed nodes are dropped; replies by graph node."""
        nodes = {k: self.flwr_node[k] for k in contents}
        got, failures = exchange(self.grid, nodes, contents, message_type, rnd, stage, self.settings.round_timeout,
                                 self._decode)
        for k in [k for k, v in got.items() if v["client"] != self.clients[k]]:
            failures.append(Failure(rnd, k, stage, "invalid payload: reply claims another client", nodes[k]))
            del got[k]
        for f in failures:  # exchange names the graph node of every failure
            self._drop(cast(int, f.client), f.round, f.stage, f.reason)
        return got

    def _decode(self, k: int, content: RecordDict) -> dict[str, Any]:
        """Node ``k``'s reply; its outbox may only address ``k``'s neighbours with vectors no longer
        than the largest model of the run (checked before decoding).
        """
        free = max(self.dims.values(), default=0)
        return _decode_step(content, {str(j): ArraySpec((None,)) for j in self.specs[k].neighbours} if free else None,
                            free)

    def _drop(self, k: int, rnd: int, stage: str, reason: str) -> None:
        failure = Failure(rnd, self.clients[k], stage, reason, self.flwr_node[k])
        if k in self.alive:
            self.alive.discard(k)
            log.warning("node %s (client %s) dropped in iteration %d: %s; its edges are removed", failure.node_id,
                        failure.client, rnd, reason)
        self.round_failures.append(failure)

    def _check_outbox(self, k: int, phase: str, outbox: dict[int, np.ndarray]) -> str | None:
        nbrs = set(self.specs[k].neighbours)
        if set(outbox) - nbrs:
            return f"payloads addressed to non-neighbours {sorted(set(outbox) - nbrs)}"
        for j, v in outbox.items():
            if v.ndim != 1 or v.dtype.kind != "f" or not np.isfinite(v).all():
                return f"payload to {j} in phase {phase!r} must be a finite 1-D float vector"
            size = self.sizes.setdefault((k, j, phase), v.size)
            if v.size != size:
                return f"payload to {j} in phase {phase!r} has {v.size} values; earlier {size}"
        return None

    # ---- the run ---------------------------------------------------------------------------
    def setup(self) -> None:
        """Send every node its spec; it builds its peer and algorithm state."""
        contents = {k: RecordDict({"config": config_record({**self.job, "seq": 0,
                                                            "spec": json.dumps(self.specs[k].to_dict())})})
                    for k in sorted(self.alive)}
        got = self._send(0, "setup", f"{MessageType.QUERY}.peer", contents)
        self.start_norm = max([1.0, *(float(v["report"]["norm"]) for v in got.values())])

    def _route(self, got: dict[int, dict[str, Any]]) -> dict[int, dict[int, np.ndarray]]:
        """Node j's inbox: each live neighbour's payload to j; for a dropped (or silent) neighbour,
        j's own payload to it (which zeroes that edge's coupling terms). Counts relayed bits.
        """
        inbox: dict[int, dict[int, np.ndarray]] = {}
        for j in sorted(self.alive):
            inbox[j] = {}
            for i in self.specs[j].neighbours:
                payload = got[i]["outbox"].get(j) if i in self.alive and i in got else None
                if payload is not None:
                    inbox[j][i] = payload
                    self.bits += payload.size * BITS_PER_FLOAT
                elif j in got and i in got[j]["outbox"]:
                    inbox[j][i] = got[j]["outbox"][i]
        return inbox

    def _screen(self, rnd: int, it: int, phase: str, got: dict[int, dict[str, Any]]) -> None:
        """Divergence check on the reported norms; drop nodes whose payloads are invalid."""
        for i, v in list(got.items()):
            norm = float(v["report"]["norm"])
            if not np.isfinite(norm) or norm > 1e6 * self.start_norm:
                raise _divergence_error(self.algorithm, it, i, norm)
            reason = self._check_outbox(i, phase, v["outbox"]) if phase else None
            if reason is not None:
                self._drop(i, rnd, "step", f"invalid payload: {reason}")
                del got[i]

    def run(self) -> Result:
        """Setup, then per iteration one message per phase to every live node, then a final one."""
        s, phases = self.settings, self.algorithm.phases
        history = Result(self.algorithm.name, s.job.seed, family="peer")
        out = RunOutputs(self.run_dir, RELAY_RECORD_FIELDS, RELAY_CURVE_FIELDS)
        self.round_failures: list[Failure] = []
        self.setup()
        schedule = [(k, p) for k in range(1, s.job.rounds + 1) for p in phases] + [(s.job.rounds, "")]
        inbox: dict[int, dict[int, np.ndarray]] = {}
        prev: tuple[int, str] = (0, "")
        cumulative = 0
        for seq, (k, phase) in enumerate(schedule, start=1):
            contents = {
                i: RecordDict({
                    # seq: the message's place in the run, so a node computes a copy sent again after a
                    # SuperLink outage from the state the first copy started from (topofl.flower.peer)
                    "config": config_record({**self.job, "seq": seq, "apply": prev[1], "apply_k": prev[0],
                                             "emit": phase}),
                    "inbox": arrays_record({str(j): v for j, v in inbox.get(i, {}).items()}),
                })
                for i in sorted(self.alive)
            }
            got = self._send(k, "step", f"{MessageType.TRAIN}.peer", contents)
            self._screen(k, prev[0], phase, got)
            if prev[1] and prev[1] == phases[-1]:  # iteration prev[0] just completed on every live node
                rows = [{"round": prev[0], "client": self.clients[i],
                         "accuracy": v["report"].get("accuracy", float("nan")), "loss": v["report"]["loss"],
                         "dim": self.dims[i]} for i, v in sorted(got.items()) if "loss" in v["report"]]
                cumulative += self.bits
                summary = {"round": prev[0], **summarise_peers(rows), "bits": self.bits, "cumulative_bits": cumulative,
                           "map_storage_bytes": int(sum(v["report"]["state_bytes"] for v in got.values())),
                           "n_clients": len(rows), "n_failures": len(self.round_failures)}
                history.records.extend(rows)
                history.iterations.append(summary)
                nan = float("nan")
                history.rounds.append(RoundSummary(  # the relay sees accuracy and loss; every bit sent is received
                    round=prev[0], auc=nan, auc_std=nan, accuracy=summary["accuracy"],
                    accuracy_std=summary["accuracy_std"], loss=summary["loss"], pooled_auc=nan, pooled_accuracy=nan,
                    n_clients_auc=0, bytes_up=self.bits // 8, bytes_down=self.bits // 8,
                    **{k: summary[k] for k in ("mse", "rmse", "r2") if k in summary}))
                out.round(rows, summary, None, self.round_failures)
                log.info("iteration %d: accuracy %.4f over %d node(s), %d bits", prev[0], summary["accuracy"],
                         len(rows), self.bits)
                self.failures.extend(self.round_failures)
                self.bits, self.round_failures = 0, []
            inbox = self._route(got) if phase else {}
            prev = (k, phase)
        self.failures.extend(self.round_failures)
        history.failures = self.failures
        history.out_dir = str(self.run_dir) if self.run_dir is not None else None
        out.failures = list(self.failures)
        out.finish(s.job.method, s.as_dict(), {
            "graph_edges": sorted(map(list, self.graph.edges)),
            "dropped": sorted(self.clients[k] for k in set(self.flwr_node) - self.alive),
            **run_status(self.failures, "iteration"),
        })
        return history


def relay_main(grid: Grid, settings: FlowerSettings, run_id: Any = None, root: Any = None) -> Result:
    """Run a decentralised method on the connected SuperNodes through the relay (results in a
    fresh directory under the results root, checked before any node is contacted).
    """
    run_dir = resolve_run_dir(settings.out_dir, root if root is not None else results_root(),
                              run_id if run_id is not None else new_run_id())
    return Relay(grid, settings, run_dir).run()
