"""Documented upper bounds on what a user, a config file or a client may ask for.

A request above a bound is refused with a ``ValueError`` naming the field and the bound *before*
any work starts, so that a typo such as ``--seeds 0-100000000`` fails at once instead of running
until killed. docs/threat-model.md ("Bounds") lists the same numbers.
"""
from __future__ import annotations

#: Largest seed value (NumPy seeds are unbounded, but a seed above 2**32 - 1 is almost certainly a typo).
MAX_SEED = 2**32 - 1
#: Most seeds one command may run.
MAX_SEEDS = 1000
#: Most communication rounds (iterations for decentralised methods) of one run.
MAX_ROUNDS = 100_000
#: Most clients a built-in scenario may generate.
MAX_CLIENTS = 10_000
#: Most samples a built-in scenario may generate per client.
MAX_SAMPLES_PER_CLIENT = 1_000_000
#: Most features a built-in scenario may generate.
MAX_FEATURES = 10_000
#: Most numbers a built-in scenario may generate in all (clients × samples × features): 1.6 GB of float64.
MAX_SCENARIO_VALUES = 200_000_000
#: Largest example count a client may declare when it joins a federation (its aggregation weight).
MAX_CLIENT_EXAMPLES = 10**9
#: Most classes a classification task may have.
MAX_CLASSES = 1000
#: Most values a reply array of free length (e.g. a persistence diagram) may declare before it
#: is decoded (8 MB of float64); arrays of fixed length are bounded by the server's model.
MAX_REPLY_FREE_VALUES = 1_000_000
#: Most experiment runs executed in parallel (``--jobs``).
MAX_JOBS = 64
