"""A local multi-page web site served on 127.0.0.1 from a link graph (demo, tests, benchmarks)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np

from scrapy_opic.opic.graph import Graph, from_edges, power_law_graph


def site_graph(n: int, seed: int = 0) -> Graph:
    """A web-site-like link graph: power-law in-degrees (the paper's model), a home page (0)
    that links to 20 pages, and every page linking back home."""
    g = power_law_graph(n, seed=seed)
    rng = np.random.default_rng(seed)
    home = rng.choice(np.arange(1, n), size=min(20, n - 1), replace=False)
    src = np.concatenate([g.sources(), np.zeros(home.size, dtype=np.int64), np.arange(1, n)])
    dst = np.concatenate([g.indices, home, np.zeros(n - 1, dtype=np.int64)])
    return from_edges(src, dst, n)


def reachable(g: Graph, start: int = 0) -> set[int]:
    """The pages of ``g`` reachable from ``start`` (what a one-pass crawl from it fetches)."""
    seen, todo = {start}, [start]
    while todo:
        i = todo.pop()
        for j in g.children(i):
            if int(j) not in seen:
                seen.add(int(j))
                todo.append(int(j))
    return seen


#: The spider trap's links: day d links to d + k for each k (the next days and months).
CALENDAR_STEPS = (1, 2, 3, 30, 31)


class _LoopbackServer:
    """A threaded HTTP server on 127.0.0.1 (a free port), running inside a ``with`` block; with
    several loopback ``addresses`` (127.0.0.2, ...: Linux routes all of 127/8 to the loopback
    interface), one server per address on the same port, so that a crawl sees several hosts."""

    def _serve(self, handler, addresses: tuple[str, ...] = ("127.0.0.1",)) -> None:
        self.servers: list[ThreadingHTTPServer] = []
        port = 0
        for address in addresses:
            server = ThreadingHTTPServer((address, port), handler)
            port = server.server_address[1]
            self.servers.append(server)
        self.server = self.servers[0]
        self.port = port
        self.threads = [
            threading.Thread(target=server.serve_forever, daemon=True) for server in self.servers
        ]

    def __enter__(self):
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()


class Site(_LoopbackServer):
    """Serves ``/p/<i>.html`` for every node of ``graph``, linking to its out-neighbours.

    ``redirects`` maps a node to another: its URL answers 301 to the other's. ``errors`` lists
    nodes that answer 500. ``offsite`` lists nodes whose pages also link to an external host.
    ``loops`` lists nodes whose pages also link into an endless chain of redirects.
    ``forbidden`` lists nodes that ``/robots.txt`` disallows; ``gone`` nodes that answer 404;
    ``fail_once`` nodes whose first request answers 503.
    """

    def __init__(
        self,
        graph: Graph,
        redirects: dict[int, int] | None = None,
        errors: set[int] | None = None,
        offsite: set[int] | None = None,
        delay: float = 0.0,
        trap: bool = False,
        host_of: Callable[[int], str] | None = None,
        addresses: tuple[str, ...] = ("127.0.0.1",),
        loops: set[int] | None = None,
        forbidden: set[int] | None = None,
        gone: set[int] | None = None,
        fail_once: set[int] | None = None,
    ) -> None:
        self.graph = graph
        self.forbidden = forbidden or set()
        self.gone = gone or set()
        self.fail_once = set(fail_once or ())
        self.loops = loops or set()
        self.delay = delay
        self.trap = trap
        self.host_of = host_of or (lambda i: "127.0.0.1")  # host name of page i (all loopback)
        self._lock = threading.Lock()
        self.redirects = redirects or {}
        self.errors = errors or set()
        self.offsite = offsite or set()
        self.hits: list[str] = []
        #: The access log: (host, path, start, end) per request, on this machine's monotonic
        #: clock, from the moment the server reads the request to the moment it has answered.
        self.access_log: list[tuple[str, str, float, float]] = []
        #: The User-Agent of each request of the access log (which process sent it).
        self.agents: list[str] = []
        site = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep test output quiet
                pass

            def do_GET(self) -> None:
                start = time.monotonic()
                host = (self.headers.get("Host") or "").split(":")[0]
                with site._lock:
                    site.hits.append(self.path)
                if site.delay:
                    time.sleep(site.delay)
                status, headers, body = site.respond(self.path)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                site.access_log.append((host, self.path, start, time.monotonic()))
                site.agents.append(self.headers.get("User-Agent") or "")

        self._serve(Handler, addresses)

    def url(self, i: int) -> str:
        return f"http://{self.host_of(i)}:{self.port}/p/{i}.html"

    def respond(self, path: str) -> tuple[int, dict[str, str], bytes]:
        if path == "/robots.txt":
            rules = "".join(f"Disallow: /p/{i}.html\n" for i in sorted(self.forbidden))
            return 200, {"Content-Type": "text/plain"}, f"User-agent: *\n{rules}".encode()
        if path.startswith("/cal/"):
            return self._calendar(path)
        if path.startswith("/loop/"):  # an endless chain of redirects: /loop/i-k -> /loop/i-k+1
            head, _, k = path.removesuffix(".html").rpartition("-")
            return 302, {"Location": f"{head}-{int(k) + 1}.html"}, b""
        try:
            i = int(path.removeprefix("/p/").removesuffix(".html"))
        except ValueError:
            return 404, {}, b"not found"
        if not 0 <= i < self.graph.n:
            return 404, {}, b"not found"
        if i in self.redirects:
            return 301, {"Location": self.url(self.redirects[i])}, b""
        if i in self.errors:
            return 500, {}, b"boom"
        if i in self.gone:
            return 404, {}, b"not found"
        with self._lock:
            if i in self.fail_once:
                self.fail_once.discard(i)
                return 503, {}, b"busy"
        links = "".join(
            f'<a href="{self.url(int(j))}">{int(j)}</a> ' for j in self.graph.children(i)
        )
        if i in self.offsite:
            links += '<a href="http://elsewhere.invalid/x.html">out</a>'
        if i in self.loops:
            links += f'<a href="/loop/{i}-0.html">loop</a>'
        if self.trap:
            links += '<a href="/cal/0.html">calendar</a>'
        body = f"<html><head><title>page {i}</title></head><body>{links}</body></html>"
        return 200, {"Content-Type": "text/html"}, body.encode()

    def _calendar(self, path: str) -> tuple[int, dict[str, str], bytes]:
        """A spider trap: an endless calendar, day ``d`` links to the next days and months."""
        try:
            d = int(path.removeprefix("/cal/").removesuffix(".html"))
        except ValueError:
            return 404, {}, b"not found"
        links = "".join(f'<a href="/cal/{d + k}.html">+{k}</a> ' for k in CALENDAR_STEPS)
        body = f"<html><head><title>day {d}</title></head><body>{links}</body></html>"
        return 200, {"Content-Type": "text/html"}, body.encode()


class ChangingSite(Site):
    """A :class:`Site` that changes under a crawl, atomically: the server counts the requests
    for pages (``/p/...``) under a lock, answers the first ``switch_at`` of them from
    ``before`` and every later one from ``after``. Both graphs are on the same node ids. A
    page exists before the change unless it is in ``new`` (it answers 404 then), and after it
    unless it is in ``removed`` (it answers 404, or 410 if it is also in ``gone_410``); the
    other options are :class:`Site`'s.

    ``log`` is the access log of page requests: ``(ordinal, node, status)``, ordinal 1 being
    the first request (so requests after the change have ordinals above ``switch_at``).
    """

    def __init__(
        self,
        before: Graph,
        after: Graph,
        switch_at: int,
        new: set[int] | None = None,
        removed: set[int] | None = None,
        gone_410: set[int] | None = None,
        **kwargs,
    ) -> None:
        if before.n != after.n:
            raise ValueError("both graphs must be on the same node ids")
        super().__init__(before, **kwargs)
        self.before, self.after, self.switch_at = before, after, switch_at
        self.new, self.removed = set(new or ()), set(removed or ())
        self.gone_410 = set(gone_410 or ())
        self.log: list[tuple[int, int, int]] = []

    def respond(self, path: str) -> tuple[int, dict[str, str], bytes]:
        if not path.startswith("/p/"):
            return super().respond(path)
        try:
            i = int(path.removeprefix("/p/").removesuffix(".html"))
        except ValueError:
            i = -1
        with self._lock:
            ordinal = len(self.log) + 1
            changed = ordinal > self.switch_at
            if not 0 <= i < self.before.n:
                status = 404
            elif changed:
                status = (410 if i in self.gone_410 else 404) if i in self.removed else 200
            else:
                status = 404 if i in self.new else 200
            self.log.append((ordinal, i, status))
        if status != 200:
            return status, {}, b"gone" if status == 410 else b"not found"
        graph = self.after if changed else self.before
        links = "".join(f'<a href="{self.url(int(j))}">{int(j)}</a> ' for j in graph.children(i))
        body = f"<html><head><title>page {i}</title></head><body>{links}</body></html>"
        return 200, {"Content-Type": "text/html"}, body.encode()

    @property
    def changed(self) -> bool:
        """Whether the site has switched to ``after``."""
        return len(self.log) > self.switch_at


class StaticSite(_LoopbackServer):
    """Serves a directory of files (an HTML manual) on 127.0.0.1, quietly; ``hits`` is its
    access log (the path of each GET, in order)."""

    def __init__(self, root: str) -> None:
        import functools
        from http.server import SimpleHTTPRequestHandler

        hits = self.hits = []

        class Handler(SimpleHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                hits.append(self.path)  # (list.append is atomic: the server's threads share it)
                super().do_GET()

        self._serve(functools.partial(Handler, directory=str(root)))

    def url(self, path: str = "") -> str:
        return f"http://127.0.0.1:{self.port}/{path}"


class RedisServer:
    """A throw-away redis-server (Debian's binary) on a free loopback port, for tests and
    benchmarks: ``with RedisServer(workdir) as url: ...``. No persistence unless ``persist``
    (an append-only file written at every command: :meth:`restart` then keeps every key);
    ``password`` makes it require one (the URL carries it). :class:`RuntimeError` if the
    binary is missing or the server does not start."""

    def __init__(self, workdir: str, persist: bool = False, password: str | None = None) -> None:
        self.workdir = str(workdir)
        self.persist = persist
        self.password = password
        self.proc = None
        self.port = 0

    def __enter__(self) -> str:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.start()
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start the server (again) on its port."""
        import shutil
        import socket
        import subprocess

        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed")
        args = [binary, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
                "--dir", self.workdir]  # fmt: skip
        args += ["--appendonly", "yes", "--appendfsync", "always"] if self.persist else [
            "--appendonly", "no"]  # fmt: skip
        if self.password:
            args += ["--requirepass", self.password]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.__exit__()
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.05)

    def stop(self) -> None:
        """Stop the server (SIGTERM: with ``persist``, its append-only file is complete)."""
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class RedisCluster:
    """A throw-away Redis Cluster on loopback, for tests and benchmarks: ``masters``
    redis-server processes (Debian's binary) in cluster mode, no replicas, no persistence,
    joined by ``redis-cli --cluster create``. ``with RedisCluster(workdir) as url: ...`` gives
    the URL of one node, a seed: a cluster client finds the others from it. On entry every node
    reports ``cluster_state:ok`` (all 16384 slots served).

    ``ports`` are the nodes' ports (each node's cluster bus is on port + 10000, Redis's rule, so
    both must be free); :meth:`stop` kills one node (its slots are then down); ``node_timeout``
    (ms) is how long the others wait before they mark a silent node as failed.
    :class:`RuntimeError` if a binary is missing or the cluster does not come up."""

    #: Ports are drawn from here: below Linux's ephemeral range (32768+) with their bus ports,
    #: so that no outgoing connection of the machine takes one meanwhile.
    PORTS = (10000, 22767)

    def __init__(self, workdir: str, masters: int = 3, node_timeout: int = 2000) -> None:
        self.workdir = str(workdir)
        self.masters = masters
        self.node_timeout = node_timeout
        self.procs: dict[int, object] = {}

    @property
    def ports(self) -> list[int]:
        return list(self.procs)

    def __enter__(self) -> str:
        import shutil
        import subprocess

        server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
        if server is None or cli is None:
            raise RuntimeError("redis-server and redis-cli are needed for a Redis Cluster")
        Path(self.workdir).mkdir(parents=True, exist_ok=True)
        try:
            for _ in range(self.masters):
                self._start_node(server)
            create = subprocess.run(
                [cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in self.procs),
                 "--cluster-replicas", "0", "--cluster-yes"],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=120,
            )  # fmt: skip
            if create.returncode != 0:
                raise RuntimeError(f"redis-cli --cluster create failed: {create.stdout[-2000:]}")
            deadline = time.monotonic() + 60
            while not all("cluster_state:ok" in self.cli(p, "cluster", "info") for p in self.procs):
                if time.monotonic() > deadline:
                    raise RuntimeError("the Redis Cluster did not reach cluster_state:ok")
                time.sleep(0.05)
        except BaseException:
            self.__exit__()
            raise
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    def cli(self, port: int, *command: str) -> str:
        """The answer of one node to ``command`` (through redis-cli), or ``""`` if none."""
        import subprocess

        run = subprocess.run(
            ["redis-cli", "-p", str(port), *command],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=30,
        )
        return run.stdout if run.returncode == 0 else ""

    def _start_node(self, binary: str) -> None:
        """Start one node on a free port whose bus port is free too (another program may take
        a port between the check and the start: then the node exits, and another pair is
        tried)."""
        import random
        import socket
        import subprocess

        log = Path(self.workdir) / "node.log"
        for _ in range(50):
            port = random.randrange(*self.PORTS)
            if port in self.procs or not all(_free(p) for p in (port, port + 10000)):
                continue
            log = Path(self.workdir) / f"node-{port}.log"
            with open(log, "w") as out:
                proc = subprocess.Popen(
                    [binary, "--port", str(port), "--bind", "127.0.0.1",
                     "--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{port}.conf",
                     "--cluster-node-timeout", str(self.node_timeout),
                     "--save", "", "--appendonly", "no", "--dir", self.workdir],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )  # fmt: skip
            deadline = time.monotonic() + 10
            while proc.poll() is None and time.monotonic() < deadline:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                except OSError:
                    time.sleep(0.05)
                    continue
                if "PONG" in self.cli(port, "ping"):
                    self.procs[port] = proc
                    return
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        tail = log.read_text()[-1000:] if log.exists() else ""
        raise RuntimeError(f"no Redis Cluster node could start; its last log: {tail}")

    def stop(self, port: int) -> None:
        """Kill the node on ``port`` (SIGKILL: it answers nothing from now on)."""
        proc = self.procs.pop(port)
        proc.kill()
        proc.wait(timeout=10)

    def __exit__(self, *exc: object) -> None:
        for port in list(self.procs):
            proc = self.procs.pop(port)
            proc.terminate()
            proc.wait(timeout=10)


def _free(port: int) -> bool:
    """Whether a TCP port of 127.0.0.1 can be bound right now."""
    import socket

    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
