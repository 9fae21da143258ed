"""How run_groups' own cost grows with the number of rollouts, locally and on a Ray cluster.

``run_groups`` runs an instant fake rollout (it returns a one-message trajectory at once) for 10,
100 and 1,000 rollouts (groups of 10), in this process and then as Ray tasks on a local Ray
cluster of two nodes started here (``ray.cluster_utils.Cluster``, ``--ray-cpus`` CPUs each;
``--ray-address`` uses a running cluster instead). Since the rollout does nothing, the wall time is
the runner's overhead. Printed, per mode and size:

* ``ms/rollout``: wall time per rollout (best of ``--repeats`` runs), and its ratio to the
  10-rollout baseline measured in the same run;
* ``held B/rollout``: Python heap (tracemalloc) held per rollout while the returned groups are
  alive (the trajectories themselves: expected, and flat);
* ``leak B/rollout``: Python heap still held per rollout after the groups are dropped and
  collected (what the runner keeps per finished rollout), and ``RSS kB/rollout``, the process's
  resident memory growth over that run per rollout (psutil; allocator noise included).

Goals: overhead flat (``ms/rollout`` within 2x of the 10-rollout baseline up to 1,000) and no
memory growth per finished rollout (``leak B/rollout`` about 0). Ray's numbers measure the
driver; worker processes are reused between tasks and not measured. Not part of the test suite.
Usage::

    .venv/bin/python bench/scale.py [--sizes 10 100 1000] [--repeats 3] [--no-ray]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import time
import tracemalloc
from typing import Any

import art_adapters as aa

GROUP = 10  # rollouts per scenario


async def instant(scenario: dict[str, Any]) -> aa.Trajectory:
    """The fake rollout: no work, one message."""
    return aa.Trajectory(messages=[aa.Message(role="user", content=str(scenario["q"]))], reward=1.0)


def scenarios_for(size: int) -> list[dict[str, Any]]:
    return [{"q": f"scenario {i}"} for i in range(max(1, size // GROUP))]


def rss() -> int | None:
    """This process's resident memory in bytes (None without psutil)."""
    try:
        import psutil
    except ImportError:
        return None
    return int(psutil.Process().memory_info().rss)


async def timed(config: aa.RunConfig, size: int) -> float:
    """Seconds one run of ``size`` rollouts takes."""
    started = time.perf_counter()
    groups = await aa.run_groups(instant, scenarios_for(size), n=min(GROUP, size), config=config, progress=False)
    elapsed = time.perf_counter() - started
    done = sum(len(g.trajectories) for g in groups)
    if done != size:
        raise RuntimeError(f"{done} of {size} rollouts finished: {[g.exceptions[:1] for g in groups][:3]}")
    return elapsed


async def settle() -> None:
    """Let the loop run the callbacks still queued (gather's, the tasks' own), then collect.

    A finished run's tasks are freed by callbacks the loop runs on its next turns; measured
    before them they would read as memory kept per rollout.
    """
    for _ in range(3):
        await asyncio.sleep(0)
    gc.collect()


async def memory(config: aa.RunConfig, size: int) -> tuple[float, float, float | None]:
    """(held, leaked) Python heap bytes per rollout and RSS growth per rollout in bytes, for one run."""
    await settle()
    rss_before = rss()
    tracemalloc.start()
    base, _ = tracemalloc.get_traced_memory()
    groups = await aa.run_groups(instant, scenarios_for(size), n=min(GROUP, size), config=config, progress=False)
    await settle()
    held, _ = tracemalloc.get_traced_memory()
    del groups
    await settle()
    left, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss_after = rss()
    grown = None if rss_before is None or rss_after is None else (rss_after - rss_before) / size
    return (held - base) / size, (left - base) / size, grown


async def measure(mode: str, config: aa.RunConfig, sizes: list[int], repeats: int) -> list[dict[str, Any]]:
    await timed(config, min(sizes))  # warm up: imports, Ray workers, the object store
    rows = []
    for size in sizes:
        seconds = min([await timed(config, size) for _ in range(repeats)])
        held, leaked, grown = await memory(config, size)
        rows.append(
            {"mode": mode, "size": size, "ms": 1000 * seconds / size, "held": held, "leaked": leaked, "rss": grown}
        )
    return rows


def print_rows(rows: list[dict[str, Any]]) -> None:
    print(f"{'mode':<6} {'rollouts':>8} {'ms/rollout':>11} {'x base':>7} {'held B/r':>9} {'leak B/r':>9} {'RSS kB/r':>9}")
    base: dict[str, float] = {}
    for row in rows:
        first = base.setdefault(row["mode"], row["ms"])
        rss_kb = "-" if row["rss"] is None else f"{row['rss'] / 1024:.2f}"
        print(
            f"{row['mode']:<6} {row['size']:>8} {row['ms']:>11.3f} {row['ms'] / first:>7.2f} "
            f"{row['held']:>9.0f} {row['leaked']:>9.0f} {rss_kb:>9}"
        )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per size; the best counts")
    parser.add_argument("--max-concurrency", type=int, default=32)
    parser.add_argument("--no-ray", action="store_true", help="measure the local path only")
    parser.add_argument("--ray-address", help="a running Ray cluster (default: start two local nodes)")
    parser.add_argument("--ray-cpus", type=int, default=1, help="CPUs of each local Ray node")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    local = aa.RunConfig(max_concurrency=args.max_concurrency, max_failures=0)
    rows = await measure("local", local, args.sizes, args.repeats)
    print_rows(rows)
    if args.no_ray:
        return
    import ray

    nodes = None
    address = args.ray_address
    if address is None:
        from ray.cluster_utils import Cluster

        nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": args.ray_cpus})
        nodes.add_node(num_cpus=args.ray_cpus)
        nodes.wait_for_nodes()
        address = nodes.address
    try:
        on_ray = local.model_copy(update={"ray_address": address})
        rows += await measure("ray", on_ray, args.sizes, args.repeats)
        print(f"ray: {address}, {len(ray.nodes())} nodes, {ray.cluster_resources().get('CPU', 0):g} CPUs")
        print_rows(rows)
    finally:
        ray.shutdown()
        if nodes is not None:
            nodes.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
