import pytest

import sim_cluster
from support import NatsServer


@pytest.fixture
def server():
    """A nats-server of its own for each test (JetStream on a file store in a temp dir)."""
    s = NatsServer()
    s.start()
    yield s
    s.cleanup()


@pytest.fixture
def cluster():
    """The harness' sim-cluster of its own for each test: the simulated API server, nats-server and
    the real kube2nats (its 18 pods mirrored). Missing binaries fail the test, saying how to build
    them."""
    try:
        c = sim_cluster.SimCluster()
    except sim_cluster.Missing as exc:
        pytest.fail(str(exc), pytrace=False)
    yield c
    c.close()
