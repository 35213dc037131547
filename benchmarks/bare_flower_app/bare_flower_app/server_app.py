"""ServerApp of the bare app: per round, one train and one evaluate message to every node through
``grid.send_and_receive`` (as topofl's FlowerPool does), the train replies averaged.
"""
import time

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.serverapp import Grid, ServerApp

app = ServerApp()


def _round_trip(grid: Grid, nodes: list[int], content: RecordDict, message_type: str, timeout: float) -> list[Message]:
    replies = list(grid.send_and_receive([Message(content, dst_node_id=n, message_type=message_type) for n in nodes], timeout=timeout))
    errors = [m.error.reason for m in replies if m.has_error()]
    if errors or len(replies) != len(nodes):
        raise RuntimeError(f"{message_type}: {len(replies)} of {len(nodes)} replies, errors {errors}")
    return replies


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Wait for ``min-nodes`` SuperNodes, then run ``num-server-rounds`` rounds of train + evaluate."""
    cfg = context.run_config
    rounds, wanted, timeout = int(cfg["num-server-rounds"]), int(cfg["min-nodes"]), float(cfg["round-timeout"])
    deadline = time.monotonic() + float(cfg["node-wait"])
    while len(nodes := sorted(grid.get_node_ids())) < wanted:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(nodes)} of {wanted} SuperNodes connected")
        time.sleep(0.2)
    nodes = nodes[:wanted]
    theta = np.zeros(int(cfg["dim"]))
    for rnd in range(1, rounds + 1):
        config = ConfigRecord({"round": rnd})
        replies = _round_trip(grid, nodes, RecordDict({"arrays": ArrayRecord({"theta": Array(theta)}), "config": config}), MessageType.TRAIN, timeout)
        theta = np.mean([m.content["arrays"]["theta"].numpy() for m in replies], axis=0)
        _round_trip(grid, nodes, RecordDict({"config": config}), MessageType.EVALUATE, timeout)
        if cfg["stamps-file"]:
            with open(str(cfg["stamps-file"]), "a") as fh:
                fh.write(f"{rnd} {time.time():.6f}\n")
