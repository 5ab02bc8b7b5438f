"""A wire-protocol test double of MongoDB 8.0 (replica-set primary or secondary, standalone, mongos), and a
fake sharded cluster of mongos routers in front of in-process shards (`start_cluster`).

It is harel-dev's local server (`harel_dev.server`) with test-only roles, fail points and controls. Real
drivers (PyMongo's MongoClient and AsyncMongoClient, Motor) connect to it over sockets; it executes commands
one at a time on mongomock. See README.md for what it does not model.
"""

from .cluster import FakeCluster
from .deployment import ClusterDeployment, start_cluster
from .router import Router
from .server import FakeMongod
from .topology import Role

__all__ = ["ClusterDeployment", "FakeCluster", "FakeMongod", "Role", "Router", "start_cluster"]
