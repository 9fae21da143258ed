"""Soak the backend: many clients, hostile requests mixed in, for a bounded time; nothing may break.

Against a running backend (``--url``, ``--api-key``) or, by default, an embedded one started in a
temporary folder, the bench first trains one tiny step so requests go through a LoRA adapter
(``soak@1``: adapter leases), measures ``/health`` and a one-token completion while idle, then for
``--seconds`` runs ``--clients`` concurrent clients, each repeatedly sending one of:

* a normal completion on ``soak@1`` (``max_tokens`` 8), its id kept;
* a stream cut after its first chunks (the client closes the connection);
* an oversized body (``--big-mb`` MB of message text);
* a tool whose parameter schema is nested ``--depth`` levels deep;
* malformed JSON;
* a foreign ``Host`` header (DNS rebinding);
* the five requests that took a server down in the second hardening round: 30,000 one-line tools,
  a ``--train-mb`` MB train body for a model that does not exist, a train step with
  ``num_iterations: 1000000``, ``n=8`` choices of 8,000 forced tokens each (every batch slot),
  and an export into a folder outside the run directory with ``force``;

while a prober times ``/health`` and a one-token completion every half second. Printed: every status
code per kind, the 5xx count (goal 0; 503s included and also counted apart), p50/p99 latency of
both probes (over every probe, whatever its answer) under attack against idle
and their ratio (goal: p99 within 3x), the server's memory growth over the attack, when the
clients stop and once the server is quiet and has returned what requests freed (goal < 10%,
embedded backend only), open adapter leases once the clients stop (goal 0) and acknowledged
records that cannot be read back (goal 0). One prober process times both phases, and idle is probed
about as many times as the attack is (a nearest-rank p99 of 20 samples is their largest). 429/503
answers with ``Retry-After`` are the admission limits working, not failures. Not part of the test suite. Usage::

    .venv/bin/python bench/soak.py [--seconds 60] [--clients 64] [--url URL --api-key KEY] [--without KIND] [--client-nice N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import random
import statistics
import tempfile
import time
from collections import Counter, defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import httpx

import art_adapters as aa

KINDS = (
    "normal", "stream_cut", "oversized", "nested", "malformed", "foreign_host",
    "many_tools", "train_unknown", "train_forever", "all_slots", "export_anywhere",
)  # fmt: skip


def nested_schema(depth: int) -> dict[str, Any]:
    """An object schema whose one property nests *depth* objects deep."""
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"x": schema}}
    return {"type": "object", "properties": {"x": schema}}


def percentile(values: list[float], q: float) -> float:
    """The *q* quantile (0-1) of *values*, nearest rank; nan when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def rss_mb(pid: int | None) -> float | None:
    """Resident memory of process *pid* in MiB (Linux ``/proc``), else ``None``."""
    if pid is None:
        return None
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


class Soak:
    """One soak run against ``base_url``: the clients, the prober and the tallies."""

    def __init__(self, base_url: str, api_key: str | None, args: argparse.Namespace) -> None:
        self.base_url = base_url
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.args = args
        self.codes: dict[str, Counter[int | str]] = defaultdict(Counter)
        self.completion_ids: list[str] = []
        big = self.chat("soak@1", 1)
        big["messages"][0]["content"] = "x" * int(args.big_mb * 1024 * 1024)
        self.big_body = json.dumps(big).encode()  # encoded once: the bench must not load its own loop
        self.nested = nested_schema(args.depth)
        self.many_tools = self.train_body = b""  # built only when their kinds are in the mix
        if "many_tools" not in args.without:
            tools = [{"type": "function", "function": {"name": f"t{i}"}} for i in range(30_000)]
            self.many_tools = json.dumps(self.chat("soak@1", 1, tools=tools)).encode()  # 1 MB
        one = json.dumps({"messages": [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hi."}],
                          "reward": 1.0})  # fmt: skip
        if "train_unknown" not in args.without:
            count = max(1, int(args.train_mb * 1024 * 1024) // (len(one) + 1))
            self.train_body = ('{"groups": [{"trajectories": [' + ",".join([one] * count) + "]}]}").encode()
        self.forever = {"groups": [{"trajectories": [json.loads(one), {**json.loads(one), "reward": 0.0}]}],
                        "config": {"num_iterations": 1_000_000}}  # fmt: skip

    def chat(self, model: str, max_tokens: int, **extra: Any) -> dict[str, Any]:
        """A chat completion body."""
        return {"model": model, "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": max_tokens,
                "temperature": 0.0, **extra}  # fmt: skip

    async def one(self, http: httpx.AsyncClient, kind: str) -> None:
        """Send one request of *kind* and count its outcome."""
        url = "/v1/chat/completions"
        try:
            if kind == "normal":
                response = await http.post(url, json=self.chat("soak@1", 8))
                if response.status_code == 200:
                    self.completion_ids.append(response.json()["id"])
            elif kind == "stream_cut":
                async with http.stream("POST", url, json=self.chat("soak@1", 32, stream=True)) as response:
                    chunks = 0
                    async for _ in response.aiter_raw():
                        chunks += 1
                        if chunks >= 2:
                            break  # leaving the block closes the connection mid-stream
            elif kind == "oversized":
                response = await http.post(url, content=self.big_body, headers={"Content-Type": "application/json"})
            elif kind == "nested":
                tool = {"type": "function", "function": {"name": "deep", "parameters": self.nested}}
                response = await http.post(url, json=self.chat("soak@1", 1, tools=[tool], tool_choice="required"))
            elif kind == "malformed":
                response = await http.post(url, content=b'{"model": "soak@1", "messages": [', headers={
                    "Content-Type": "application/json"})  # fmt: skip
            elif kind == "foreign_host":
                response = await http.post(url, json=self.chat("soak@1", 1), headers={"Host": "evil.example:80"})
            elif kind == "many_tools":
                response = await http.post(url, content=self.many_tools, headers={"Content-Type": "application/json"})
            elif kind == "train_unknown":
                response = await http.post("/art/models/nobody/train", content=self.train_body,
                                           headers={"Content-Type": "application/json"})  # fmt: skip
            elif kind == "train_forever":
                response = await http.post("/art/models/soak/train", json=self.forever)
            elif kind == "all_slots":
                response = await http.post(url, json=self.chat("soak@1", 8000, n=8, min_tokens=8000, temperature=1.0))
            else:  # export_anywhere: outside the run directory, replacing what is there
                out = f"{tempfile.gettempdir()}/soak-export-{random.randrange(10**9)}/out"
                response = await http.post("/art/models/soak/export", json={"out": out, "force": True})
            self.codes[kind][response.status_code] += 1
        except httpx.HTTPError as exc:
            self.codes[kind][type(exc).__name__] += 1

    async def client(self, deadline: float, seed: int) -> None:
        """One client: random kinds until *deadline*."""
        rng = random.Random(seed)
        kinds = [kind for kind in KINDS if kind not in self.args.without]
        weights = [self.args.normal_weight if kind == "normal" else 1 for kind in kinds]
        async with httpx.AsyncClient(base_url=self.base_url, headers=self.headers, timeout=120) as http:
            while time.monotonic() < deadline:
                await self.one(http, rng.choices(kinds, weights)[0])

    async def probe(
        self, pool: ProcessPoolExecutor, deadline: float | None, samples: int | None = None
    ) -> dict[str, list[float]]:
        """Time ``/health`` and a one-token completion every half second (until *deadline* or *samples*).

        The prober runs in a process of its own (:func:`probe_loop`, in *pool*): a thread here would
        share this process's GIL with the clients (building and sending their big bodies), and the
        latencies must be the server's. The same process measures idle and attack.
        """
        out, codes, ids = await asyncio.get_running_loop().run_in_executor(
            pool, probe_loop, self.base_url, self.headers, self.chat("soak@1", 1), deadline, samples
        )
        for name, counted in codes.items():
            self.codes[name].update(counted)
        self.completion_ids += ids
        return out


def probe_loop(
    base_url: str, headers: dict[str, str], small: dict[str, Any], deadline: float | None, samples: int | None
) -> tuple[dict[str, list[float]], dict[str, Counter[int | str]], list[str]]:
    """The prober's process: latencies per probe, status counts per probe, completion ids."""
    out: dict[str, list[float]] = {"health": [], "small": []}
    codes: dict[str, Counter[int | str]] = defaultdict(Counter)
    ids: list[str] = []
    with httpx.Client(base_url=base_url, headers=headers, timeout=120) as http:
        # one round first, not counted: the prober's first connection and the adapter's first use are
        # a cold start, which a p99 of idle samples would otherwise take as its baseline
        with contextlib.suppress(httpx.HTTPError):
            http.get("/health")
            http.post("/v1/chat/completions", json=small)
        while (deadline is None or time.monotonic() < deadline) and (samples is None or len(out["small"]) < samples):
            # every probe counts, whatever its answer: a refused probe is part of the percentiles
            for name, send in (("health", lambda: http.get("/health")),
                               ("small", lambda: http.post("/v1/chat/completions", json=small))):  # fmt: skip
                started = time.perf_counter()
                try:
                    response = send()
                    code: int | str = response.status_code
                except httpx.HTTPError as exc:
                    response, code = None, type(exc).__name__
                out[name].append(time.perf_counter() - started)
                codes[f"probe_{name}"][code] += 1
                if name == "small" and response is not None and code == 200:
                    ids.append(response.json()["id"])
            time.sleep(0.5)
    return out, dict(codes), ids


async def quiet_return(backend: aa.Backend, returns: int, timeout_s: float = 20.0) -> float:
    """Seconds until the server returned freed memory once quiet (``--quiet-memory-return-s``), at most
    ``timeout_s``: the requests that were running when the clients stopped have ended by then."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        await asyncio.sleep(0.5)
        if (await backend.request("GET", "/art/stats"))["memory"]["returns"] > returns:
            break
    return time.monotonic() - started


async def prepare(backend: aa.Backend) -> None:
    """Register ``soak`` and train one tiny step, so ``soak@1`` is a LoRA adapter."""
    model = aa.TrainableModel(name="soak", project="bench")
    await model.register(backend)
    if await model.get_step() >= 1:
        return
    client = model.openai_client()
    reply = await client.chat.completions.create(
        model=model.served_name(), messages=[{"role": "user", "content": "Name a colour."}], n=2,
        temperature=1.0, max_tokens=4, seed=0,
    )  # fmt: skip
    await client.close()
    group = aa.TrajectoryGroup(trajectories=[
        aa.Trajectory(messages=[aa.Message(role="user", content="Name a colour."),
                                aa.Message(role="assistant", content=c.message.content, completion_id=reply.id,
                                           choice_index=c.index)],
                      reward=float(c.index))
        for c in reply.choices
    ])  # fmt: skip
    result = await model.train([group])
    assert result.trained, result.reason


async def run(args: argparse.Namespace) -> None:
    """Set up, measure idle, soak, check, print."""
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        local = None
        if args.url:
            backend: aa.Backend = aa.RemoteBackend(args.url, api_key=args.api_key)
        else:
            # export_roots=[]: the server exports under its run directory only (export_anywhere: a 403)
            local = await aa.LocalBackend(
                run_dir=Path(tmp) / "backend", api_key=args.api_key, export_roots=[], extra_args=args.server_arg
            ).start()
            backend = local
        try:
            await prepare(backend)
            soak = Soak(backend.base_url, args.api_key, args)
            prober = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
            stack.callback(prober.shutdown)
            idle = await soak.probe(prober, None, samples=args.idle_samples)
            soak.codes.pop("probe_health", None)  # the tallies are the attack's
            soak.codes.pop("probe_small", None)
            pid = local.process.pid if local is not None and local.process is not None else None
            memory_before = rss_mb(pid)
            deadline = time.monotonic() + args.seconds
            print(f"idle measured; attacking for {args.seconds:.0f} s", flush=True)
            if args.client_nice:  # the clients only: the server and the prober keep their priority
                os.nice(args.client_nice)
            clients = [soak.client(deadline, seed) for seed in range(args.clients)]
            results = await asyncio.gather(soak.probe(prober, deadline), *clients)
            attack = results[0]
            memory_after = rss_mb(pid)
            returns = (await backend.request("GET", "/art/stats"))["memory"]["returns"]
            settled_s = await quiet_return(backend, returns)  # cut streams and cancelled requests end
            memory_settled = rss_mb(pid)
            stats = await backend.request("GET", "/art/stats")
            leases = stats.get("adapters", {}).get("leases", {})
            lost = 0
            for completion_id in soak.completion_ids:
                with contextlib.suppress(aa.BackendRequestError):
                    await backend.get_token_record(completion_id)
                    continue
                lost += 1
        finally:
            if local is not None:
                await local.close()
    print(f"\nsoak: {args.clients} clients for {args.seconds:.0f} s against {'a remote' if args.url else 'an embedded'} backend")
    print(f"{'kind':14}  status codes")
    server_errors = unavailable = failed = 0
    for kind in (*KINDS, "probe_health", "probe_small"):
        codes = soak.codes.get(kind, Counter())
        server_errors += sum(n for code, n in codes.items() if isinstance(code, int) and code >= 500)
        unavailable += codes.get(503, 0)
        failed += sum(n for code, n in codes.items() if isinstance(code, str))
        if kind in args.without:
            print(f"{kind:15}  (left out)")
            continue
        print(f"{kind:15}  {json.dumps({str(k): v for k, v in sorted(codes.items(), key=str)})}")
    print(f"\nresponses >= 500 (goal 0): {server_errors}, of which 503: {unavailable}; "
          f"requests without an answer (timeouts, resets): {failed}")
    for name in ("health", "small"):
        i50, i99 = percentile(idle[name], 0.5), percentile(idle[name], 0.99)
        a50, a99 = percentile(attack[name], 0.5), percentile(attack[name], 0.99)
        print(f"{name:7} p50 idle {i50 * 1000:8.1f} ms  attack {a50 * 1000:8.1f} ms   "
              f"p99 idle {i99 * 1000:8.1f} ms  attack {a99 * 1000:8.1f} ms   p99 ratio {a99 / i99:5.2f} (goal <= 3)")  # fmt: skip
    slowest = ", ".join(f"{t * 1000:.1f}" for t in sorted(attack["health"])[-5:])
    print(f"the five slowest /health probes under attack: {slowest} ms")
    if memory_before and memory_after:
        growth = (memory_after - memory_before) / memory_before
        settled = (memory_settled - memory_before) / memory_before
        print(f"server memory {memory_before:.0f} -> {memory_after:.0f} MiB when the clients stopped: {growth:+.1%} "
              f"(requests still running); once quiet ({settled_s:.1f} s later) {memory_settled:.0f} MiB: "
              f"{settled:+.1%} (goal < 10%)")  # fmt: skip
    cache = _find(stats, "prefix_cache_bytes")
    if cache is not None and memory_before and memory_after:
        print(f"of the growth, the prefix cache holds {cache / 2**20:.0f} MiB "
              f"(bounded by --prefix-cache-bytes, {_find(stats, 'prefix_cache_max_bytes', 0) / 2**20:.0f} MiB)")  # fmt: skip
    if stats.get("gc"):
        pauses = stats["gc"]
        print(f"server garbage collections by generation {pauses['collections']}, longest pause "
              f"{pauses['longest_pause_ms']} ms, {pauses['frozen_objects']} objects frozen at startup")  # fmt: skip
    if stats.get("memory"):
        returns = stats["memory"]
        print(f"freed memory returned to the OS {returns['returns']} times "
              f"({returns['returns_that_released']} released pages)")  # fmt: skip
    print(f"open adapter leases after the run (goal 0): {sum(leases.values()) if leases else 0}")
    print(f"acknowledged records not readable (goal 0): {lost} of {len(soak.completion_ids)}")
    print(f"samples: idle {len(idle['small'])}, under attack {len(attack['small'])} one-token completions; "
          f"mean /health under attack {statistics.fmean(attack['health']) * 1000:.1f} ms")  # fmt: skip


def _find(tree: Any, key: str, default: Any = None) -> Any:
    """The first value under ``key`` anywhere in a JSON tree (the stats' sections move)."""
    if isinstance(tree, dict):
        if key in tree:
            return tree[key]
        for value in tree.values():
            found = _find(value, key)
            if found is not None:
                return found
    return default


def main() -> None:
    """Parse the arguments and run the soak."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running backend; default: start an embedded one")
    parser.add_argument("--api-key")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--big-mb", type=float, default=9.0, help="size of the oversized bodies")
    parser.add_argument("--depth", type=int, default=400, help="nesting depth of the hostile tool schema")
    parser.add_argument("--normal-weight", type=float, default=3.0, help="weight of normal requests in the mix")
    parser.add_argument(
        "--idle-samples", type=int, default=60,
        help="probes while idle: about as many as the attack gets (~70 in 60 s), so both p99s are of like samples",
    )  # fmt: skip

    parser.add_argument("--train-mb", type=float, default=16.0, help="size of the train bodies for a missing model")
    parser.add_argument(
        "--server-arg", action="append", default=[], metavar="ARG",
        help="an argument for the embedded backend's serve command (repeat), e.g. --server-arg=--prefix-cache-bytes=0",
    )  # fmt: skip
    parser.add_argument(
        "--client-nice", type=int, default=0,
        help="raise the attacking clients' nice value by this much (the server and the prober keep theirs)",
    )
    parser.add_argument("--without", action="append", default=[], choices=KINDS, help="leave this kind out (repeat)")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
