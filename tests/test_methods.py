"""One registry for both families (topofl.methods)."""
import pytest

from topofl.decentralised.protocol import PeerAlgorithm
from topofl.federation.algorithm import Algorithm
from topofl.methods import REGISTRY, available, build, build_peer, build_server, family, get


def test_every_method_builds_with_its_defaults_and_its_family_is_data():
    for name, m in REGISTRY.items():
        method = build(name)
        assert isinstance(method, Algorithm if m.family == "server" else PeerAlgorithm)
        assert method.name == name and family(name) == m.family
        assert m.summary
    assert available("server") == ["ptopofl", "fedavg", "fedprox", "scaffold", "pfedme", "ditto", "perfedavg", "ifca", "local"]
    assert available("peer") == ["sheaf", "dfedu", "dpsgd", "local-peers"]
    assert available() == available("server") + available("peer")


def test_lookups_refuse_what_is_not_there():
    with pytest.raises(ValueError, match="unknown method 'nope'; available: ptopofl"):
        get("nope")
    with pytest.raises(ValueError, match="'sheaf' is a decentralised .* method; this needs a server-based one"):
        build_server("sheaf")
    with pytest.raises(ValueError, match="'fedavg' is a server-based method; this needs a decentralised"):
        build_peer("fedavg")
    with pytest.raises(ValueError, match="family must be one of server, peer"):
        available("both")
    with pytest.raises(ValueError, match="gamma must be in"):
        build("sheaf", {"gamma": 0.0})


def test_peer_configs_do_not_carry_the_server_policy():
    assert "max_update_ratio" not in get("sheaf").config.field_help()
    assert "max_update_ratio" in get("fedavg").config.field_help()
