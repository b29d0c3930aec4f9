"""Many writers on one table, and a burst of ten times what it can take: the commit queue against none.

Two `lakewarden server` processes in turn (SQLite), the same table and the same clients:
- **queue off** (`commit-queue: {enabled: false}`, how commits ran before): every commit stages at once (a new
  metadata file each) and a loser of the compare-and-swap stages again, up to 20 times;
- **queue on** (the default): a table's commits take turns on the node, first come first served, in a bounded
  line; past it, 503 with Retry-After at once.

1. *Contention*: N writers (httpx threads) commit to one table as fast as they can for `--seconds` (a property
   change per commit, so no requirement fails: every refusal is the server's), N = 1, 4, 16. A writer answered
   503 waits its Retry-After, as Iceberg clients do. Reported: commits/s, p50/p99 latency of the commits that
   landed, refusals. Goal: with the queue, N writers keep >= 0.8x the commit rate of one writer, with no
   commit failing for lost races.
2. *Overload*: clients (closed loop, 30 s timeout) on the one table for `--seconds`, while a probe commits
   every 50 ms. *Polite*: 10x as many clients as the one-writer rate in commits/s, each waiting its Retry-After
   after a 503 as Iceberg's clients do (asyncio clients; wrk cannot wait per connection): an offered load of
   >= 10x what the table takes, as each client would come back every second if told `Retry-After: 1`.
   *Hammering*: 256 clients that send again at once, whatever the answer. Reported: answers by status,
   timeouts, the rate answered and the commits that landed, the probe's p99 per status, the server's peak
   resident memory. Goals, with the queue: no timeout, every refusal a 503 with Retry-After, in the polite
   burst the table still commits at >= 0.5x the one-writer rate, and the server's memory grows by < 100 MB.

    .venv/bin/python bench/commit_contention.py [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import admin_token, bar_chart, in_temporary_dir, running_server, server_pid, summary, write

WRITERS = (1, 4, 16)
HAMMER_CLIENTS = 256
PREFIX = "/iceberg/v1/bench/namespaces/db/tables/t"
GOAL_RATE_RATIO = 0.8
GOAL_GOODPUT = 0.5  # in a polite burst, the table still commits at >= half the rate of one writer
GOAL_RSS_GROWTH_MB = 100


def body(n: int) -> dict[str, Any]:
    return {"updates": [{"action": "set-properties", "updates": {"n": str(n)}}]}


def contention(root: str, headers: dict[str, str], writers: int, seconds: float) -> dict[str, Any]:
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    lock = threading.Lock()
    deadline = time.perf_counter() + seconds

    def writer(w: int) -> None:
        mine: list[float] = []
        seen: dict[int, int] = {}
        with httpx.Client(timeout=60) as client:
            n = 0
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                response = client.post(f"{root}{PREFIX}", json=body(w * 1_000_000 + n), headers=headers)
                seen[response.status_code] = seen.get(response.status_code, 0) + 1
                if response.status_code == 200:
                    mine.append((time.perf_counter() - started) * 1000)
                elif response.status_code == 503:
                    time.sleep(float(response.headers.get("Retry-After", "1")))
                n += 1
        with lock:
            latencies.extend(mine)
            for code, count in seen.items():
                statuses[code] = statuses.get(code, 0) + count

    started = time.perf_counter()
    threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    stats = summary(latencies) if latencies else {"p50": 0.0, "p99": 0.0}
    return {
        "writers": writers,
        "commits_per_second": round(len(latencies) / elapsed, 1),
        "p50_ms": round(stats["p50"], 1),
        "p99_ms": round(stats["p99"], 1),
        "answers": {str(k): v for k, v in sorted(statuses.items())},
    }


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def polite_clients(root: str, token: str, clients: int, seconds: float) -> dict[str, int]:
    """`clients` writers on keep-alive connections (asyncio streams: a light load generator on shared cores), each
    committing again as soon as it is answered, and after a 503 first waiting the Retry-After it was given, as
    Iceberg's clients do. wrk cannot model this: its Lua `delay()` knows no connection, so a wait meant for one
    client fell on whichever sent next."""
    url = httpx.URL(f"{root}{PREFIX}")
    counts = {"200": 0, "503": 0, "other": 0, "timeout": 0, "retry_after": 0, "requests": 0}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds

    async def exchange(streams: list[Any], request: bytes) -> tuple[str, dict[str, str]]:
        """Sends on the client's connection and reads the answer; a connection the server closed while the client
        waited (uvicorn keeps an idle one 5 s) is opened again and the request sent again."""
        for attempt in range(2):
            if not streams:
                streams.extend(await asyncio.open_connection(url.host, url.port))
            reader, writer = streams
            try:
                writer.write(request)
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
            except (asyncio.IncompleteReadError, ConnectionError):
                writer.close()
                streams.clear()
                if attempt:
                    raise
                continue
            lines = head.decode("latin-1").split("\r\n")
            fields = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:] if x)}
            await reader.readexactly(int(fields.get("content-length", "0")))
            return lines[0].split()[1], fields
        raise AssertionError("unreachable")

    async def client(number: int) -> None:
        streams: list[Any] = []
        n = 0
        try:
            while loop.time() < deadline:
                n += 1
                payload = json.dumps(body(number * 1_000_000 + n)).encode()
                request = (
                    f"POST {url.raw_path.decode()} HTTP/1.1\r\nHost: {url.host}\r\nAuthorization: Bearer {token}\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n".encode()
                    + payload
                )
                try:
                    status, fields = await exchange(streams, request)
                except TimeoutError:
                    counts["timeout"] += 1
                    return
                counts["requests"] += 1
                counts[status if status in ("200", "503") else "other"] += 1
                if status == "503":
                    wait = fields.get("retry-after")
                    counts["retry_after"] += wait is not None
                    await asyncio.sleep(min(float(wait or 1), max(0.0, deadline - loop.time())))
        finally:
            if streams:
                streams[1].close()

    await asyncio.gather(*(client(i) for i in range(clients)))
    return counts


BURST_SCRIPT = """
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args) ok = 0; refused = 0; other = 0; retry_after = 0; n = 0 end
request = function()
  n = n + 1
  return wrk.format("POST", nil, {["Content-Type"] = "application/json", ["Authorization"] = "Bearer TOKEN"},
    '{"updates": [{"action": "set-properties", "updates": {"n": "' .. n .. '"}}]}')
end
function response(status, headers, body)
  if status == 200 then ok = ok + 1
  elseif status == 503 then
    refused = refused + 1
    if headers["Retry-After"] or headers["retry-after"] then retry_after = retry_after + 1 end
  else other = other + 1 end
end
function done(summary, latency, requests)
  local o, r, x, ra = 0, 0, 0, 0
  for _, t in ipairs(threads) do
    o = o + t:get("ok"); r = r + t:get("refused"); x = x + t:get("other"); ra = ra + t:get("retry_after")
  end
  io.write(string.format("ANSWERS %d %d %d %d %d %d\\n", o, r, x, ra, summary.errors.timeout, summary.requests))
end
"""


def overload(
    root: str, token: str, connections: int, seconds: float, pid: int, tmp: Path, polite: bool
) -> dict[str, Any]:
    """`connections` clients (closed loop, 30 s timeout) on one table: polite ones (`polite_clients`) wait
    Retry-After after a 503, the others (wrk) send again at once. Meanwhile a probe commits every 50 ms and times
    each answer by status."""
    script = tmp / "hammer.lua"
    script.write_text(BURST_SCRIPT.replace("TOKEN", token))
    probe: dict[str, list[float]] = {}
    peak = [rss_mb(pid)]
    before = peak[0]
    stop = threading.Event()

    def probing() -> None:
        with httpx.Client(timeout=30) as client:
            n = 0
            while not stop.is_set():
                started = time.perf_counter()
                try:
                    answer = client.post(f"{root}{PREFIX}", json=body(-n), headers={"Authorization": f"Bearer {token}"})
                    status = str(answer.status_code)
                except httpx.TimeoutException:
                    status = "timeout"
                probe.setdefault(status, []).append((time.perf_counter() - started) * 1000)
                peak[0] = max(peak[0], rss_mb(pid))
                n += 1
                stop.wait(0.05)

    committed = _version(root, token)
    prober = threading.Thread(target=probing)
    prober.start()
    command = [
        "wrk",
        "-t",
        "1",  # one client thread: the load generator shares this machine's cores with the server
        "-c",
        str(connections),
        "-d",
        f"{int(seconds)}s",
        "--timeout",
        "30s",
        "-s",
        str(script),
    ]
    if polite:  # in a process of its own, as wrk is
        polite_command = [sys.executable, __file__, "--polite", root, token, str(connections), str(seconds)]
        counts = json.loads(subprocess.run(polite_command, capture_output=True, text=True, check=True).stdout)
        ok, refused, other, retry_after = counts["200"], counts["503"], counts["other"], counts["retry_after"]
        timeouts, requests = counts["timeout"], counts["requests"]
    else:
        out = subprocess.run([*command, f"{root}{PREFIX}"], capture_output=True, text=True, check=True).stdout
        ok, refused, other, retry_after, timeouts, requests = map(int, out.split("ANSWERS ")[1].split()[:6])
    stop.set()
    prober.join()
    goodput = (_version(root, token) - committed) / seconds  # every commit that landed, the probe's included
    return {
        "clients": connections,
        "polite": polite,
        "answered_per_second": round(requests / seconds, 1),
        "commits_per_second": round(goodput, 1),
        "answers": {"200": ok, "503": refused, "other": other, "timeout": timeouts},
        "refusals_with_retry_after": retry_after,
        "probe_p99_ms": {k: round(summary(v)["p99"], 1) for k, v in sorted(probe.items())},
        "probe_answers": {k: len(v) for k, v in sorted(probe.items())},
        "rss_mb": {"before": round(before, 1), "peak": round(peak[0], 1), "after": round(rss_mb(pid), 1)},
    }


def _version(root: str, token: str) -> int:
    """How many commits the table has had (its metadata files are numbered by version)."""
    answer = httpx.get(f"{root}{PREFIX}", headers={"Authorization": f"Bearer {token}"}, timeout=60).json()
    return int(answer["metadata-location"].rsplit("/", 1)[1].split("-", 1)[0])


def measure(tmp: Path, queue: bool, seconds: float) -> dict[str, Any]:
    where = tmp / ("on" if queue else "off")
    where.mkdir()
    settings = (
        "  evaluator: {interval: 10s, recheck-interval: 1min}\n"
        + ("" if queue else "  commit-queue: {enabled: false}\n")
        + "catalogs: [{name: bench, type: internal}]\nresource-groups: [{name: default, container: local}]\n"
    )
    with running_server(str(where), settings) as root:
        token = admin_token(str(where))
        headers = {"Authorization": f"Bearer {token}"}
        catalog = RestCatalog("bench", uri=f"{root}/iceberg", warehouse="bench", token=token)
        catalog.create_namespace("db")
        catalog.create_table("db.t", Schema(NestedField(1, "id", LongType(), required=False)))
        runs = []
        for writers in WRITERS:
            runs.append(contention(root, headers, writers, seconds))
            print(f"  queue {'on' if queue else 'off'}, {writers:>2} writer(s): {runs[-1]}", flush=True)
        pid = server_pid(str(where))
        one = runs[0]["commits_per_second"]
        polite = overload(root, token, max(64, round(10 * one)), seconds, pid, where, polite=True)
        print(f"  queue {'on' if queue else 'off'}, polite burst: {polite}", flush=True)
        hammer = overload(root, token, HAMMER_CLIENTS, seconds, pid, where, polite=False)
        print(f"  queue {'on' if queue else 'off'}, hammering: {hammer}", flush=True)
    return {"contention": runs, "overload": polite, "hammering": hammer}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--polite", nargs=4, metavar=("URL", "TOKEN", "CLIENTS", "SECONDS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.polite:  # the polite burst's clients (run by `overload`)
        root, token, clients, seconds = args.polite
        print(json.dumps(asyncio.run(polite_clients(root, token, int(clients), float(seconds)))))
        return
    out: dict[str, Any] = {}

    def run(tmp: Path) -> None:
        for queue in (False, True):
            out["queue on" if queue else "queue off"] = measure(tmp, queue, args.seconds)

    in_temporary_dir(run)
    on = out["queue on"]
    rates = {r["writers"]: r["commits_per_second"] for r in on["contention"]}
    many = rates[max(WRITERS)] / rates[1] if rates[1] else 0.0
    burst, hammer = on["overload"], on["hammering"]
    out["goals"] = {
        f"{max(WRITERS)} writers / 1 writer, queue on (>= {GOAL_RATE_RATIO})": round(many, 2),
        "commits lost to races, queue on (0)": sum(r["answers"].get("409", 0) for r in on["contention"]),
        # each polite client wants to commit all the time: the demand is the clients, who would come back every
        # second if told Retry-After: 1
        "polite burst: offered / 1 writer's rate (>= 10)": round(burst["clients"] / rates[1], 1),
        f"polite burst: commits / 1 writer's rate (>= {GOAL_GOODPUT})": round(
            burst["commits_per_second"] / rates[1], 2
        ),
        "timeouts, queue on (0)": sum(
            b["answers"]["timeout"] + b["probe_answers"].get("timeout", 0) for b in (burst, hammer)
        ),
        "503s without Retry-After (0)": sum(
            b["answers"]["503"] - b["refusals_with_retry_after"] for b in (burst, hammer)
        ),
        f"server memory growth in the bursts (< {GOAL_RSS_GROWTH_MB} MB)": round(
            max(b["rss_mb"]["peak"] - b["rss_mb"]["before"] for b in (burst, hammer)), 1
        ),
    }
    goals = list(out["goals"].values())
    out["met"] = (
        goals[0] >= GOAL_RATE_RATIO
        and goals[1] == 0
        and goals[2] >= 10
        and goals[3] >= GOAL_GOODPUT
        and goals[4] == 0
        and goals[5] == 0
        and goals[6] < GOAL_RSS_GROWTH_MB
    )
    print(out["goals"], "met" if out["met"] else "NOT met")
    write("commit_contention", out)
    bars = {
        f"{mode}, {r['writers']} writer(s)": r["commits_per_second"]
        for mode in ("queue off", "queue on")
        for r in out[mode]["contention"]
    }
    bar_chart(
        "commit_contention", "Commits/s on one table (SQLite)", bars, "commits/s", goal=GOAL_RATE_RATIO * rates[1]
    )


if __name__ == "__main__":
    main()
