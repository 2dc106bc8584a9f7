"""A Ray worker node for tests/test_fleet.py, run as a script: python fleet_node.py GCS_ADDRESS.

It starts the node as ``ray.cluster_utils.Cluster.add_node`` does (on 127.0.0.1, one trial at a
time), in this process, so that a test can start it where the test's own node cannot be: in a
mount namespace of its own. SIGTERM stops it and its processes."""

import signal
import sys
import time

from ray._private.node import Node
from ray._private.parameter import RayParams

if __name__ == "__main__":
    params = RayParams(
        gcs_address=sys.argv[1], num_cpus=1, num_gpus=0, object_store_memory=100 * 2**20,
        min_worker_port=0, max_worker_port=0, resources={"autotune": 1}, include_log_monitor=False,
        node_manager_port=0,
    )  # fmt: skip
    params.dashboard_agent_listen_port = None
    node = Node(params, head=False, shutdown_at_exit=True, spawn_reaper=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # exit runs the node's shutdown
    while True:
        time.sleep(1)
