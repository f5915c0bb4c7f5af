#!/usr/bin/env python3
"""Writes a synthetic cluster for `convoy-scheduler simulate` in upstream
scheduler_perf's SchedulingBasic shape: nodes of 4 CPU / 32Gi / 110 pods,
pods of 100m / 500Mi, all for `convoy-scheduler`.

    scripts/gen-cluster.py --nodes 5000 --pods 10000 > /tmp/basic-5000.yaml
"""
import argparse
import json
import sys

p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("--nodes", type=int, default=5000)
p.add_argument("--pods", type=int, default=10000)
p.add_argument("--pod-cpu", default="100m")
p.add_argument("--pod-memory", default="500Mi")
a = p.parse_args()

items = []
for i in range(a.nodes):
    alloc = {"cpu": "4", "memory": "32Gi", "pods": "110"}
    items.append({"apiVersion": "v1", "kind": "Node",
                  "metadata": {"name": f"node-{i}", "labels": {"kubernetes.io/hostname": f"node-{i}"}},
                  "status": {"allocatable": alloc, "capacity": alloc}})
for i in range(a.pods):
    items.append({"apiVersion": "v1", "kind": "Pod",
                  "metadata": {"name": f"pod-{i}", "namespace": "default", "uid": f"uid-{i}"},
                  "spec": {"schedulerName": "convoy-scheduler",
                           "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10",
                                           "resources": {"requests": {"cpu": a.pod_cpu, "memory": a.pod_memory}}}]}})
# JSON is valid YAML and much faster to write and read.
json.dump({"apiVersion": "v1", "kind": "List", "items": items}, sys.stdout)
