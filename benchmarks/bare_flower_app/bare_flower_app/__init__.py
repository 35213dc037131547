"""A bare Flower NumPy app: the floor that topofl's Flower rounds are compared with (benchmarks/bench_flower_round.py)."""
