"""ClientApp of the bare app: returns the model it was sent (train) or one metric (evaluate); imports only Flower."""
from flwr.app import Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

app = ClientApp()


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Send the received arrays back, with a sample count."""
    content = RecordDict({"arrays": msg.content["arrays"], "metrics": MetricRecord({"num-examples": 1})})
    return Message(content, reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """Reply with a constant loss."""
    return Message(RecordDict({"metrics": MetricRecord({"num-examples": 1, "loss": 0.0})}), reply_to=msg)
