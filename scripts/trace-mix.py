#!/usr/bin/env python3
"""Derives createGpuJobs' request mix from the Alibaba GPU trace.

Reads cluster-trace-gpu-v2023/csv/openb_pod_list_default.csv of
https://github.com/alibaba/clusterdata (8,152 tasks of a production GPU
cluster; Weng et al., "Beware of Fragmentation", USENIX ATC '23) and
writes the number of tasks per request shape (GPUs, CPU millicores, memory
MiB) as the CSV that `gpuMixPath` reads. Tasks that share a GPU
(gpu_milli < 1000) count as one whole GPU: a whole-GPU device plugin
(nvidia.com/gpu) hands them one.

Usage: scripts/trace-mix.py openb_pod_list_default.csv > benches/config/mixes/alibaba-gpu-v2023.csv
"""

import collections
import csv
import sys


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    with open(sys.argv[1], newline="") as f:
        rows = list(csv.DictReader(f))
    for want in ("num_gpu", "cpu_milli", "memory_mib", "gpu_milli"):
        if rows and want not in rows[0]:
            sys.exit(f"{sys.argv[1]}: no column {want!r}")
    shapes = collections.Counter(
        (int(r["num_gpu"]), int(r["cpu_milli"]), int(r["memory_mib"])) for r in rows
    )
    shared = sum(1 for r in rows if int(r["num_gpu"]) == 1 and int(r["gpu_milli"]) < 1000)
    by_gpus = collections.Counter()
    for (gpus, _, _), n in shapes.items():
        by_gpus[gpus] += n
    out = sys.stdout
    out.write("# Request mix of createGpuJobs, derived by scripts/trace-mix.py from\n")
    out.write("# Alibaba cluster-trace-gpu-v2023 openb_pod_list_default.csv\n")
    out.write("# (https://github.com/alibaba/clusterdata; Weng et al., USENIX ATC '23).\n")
    out.write(f"# {len(rows)} tasks, {len(shapes)} shapes; tasks per GPU count: ")
    out.write(", ".join(f"{g}: {by_gpus[g]}" for g in sorted(by_gpus)) + ".\n")
    out.write(f"# {shared} GPU-sharing tasks (gpu_milli < 1000) count as 1 whole GPU.\n")
    out.write("# weight = number of tasks of that shape.\n")
    out.write("gpus,cpu_milli,memory_mib,weight\n")
    for (gpus, cpu, mem), n in sorted(shapes.items()):
        out.write(f"{gpus},{cpu},{mem},{n}\n")


if __name__ == "__main__":
    main()
