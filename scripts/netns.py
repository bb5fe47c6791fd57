#!/usr/bin/python3
"""An emulated cluster network on one machine: one Linux network namespace per
host, all attached to one bridge, each host's link shaped with tc.

    netns.py check
    netns.py up   --prefix P --hosts N [--rate 1gbit] [--delay-ms 0.2] [--subnet 10.77.0] [--no-measure]
    netns.py down --prefix P
    netns.py run  --prefix P --hosts N [--rate ...] [--delay-ms ...] -- COMMAND [ARG ...]

`up` prints one JSON object (the hosts, and what the network really is: rate,
whether the delay could be applied, measured RTT and bandwidth); `down` removes
everything `up` made, also after a partial or interrupted `up`; `run` brings
the network up, prints that JSON object as one line on stdout, runs COMMAND in
the root namespace (its processes enter the namespaces themselves, for example
`pushpull_bench --netns=P`), and tears the network down however COMMAND ends.
`check` exits 0 when namespaces can be made here, 1 naming the reason when not.

As a module (stdlib only; run with /usr/bin/python3):

    import netns
    hosts = netns.setup("psb", 3)      # [{"ns": "psb0", "ip": "10.77.0.1"}, ...]
    netns.run_in("psb0", ["/usr/bin/python3", "-c", "..."])
    netns.teardown("psb")
    with netns.Network("psb", 3, rate="1gbit") as hosts:   # torn down on exit,
        ...                                                 # exceptions, SIGINT, SIGTERM

Layout for prefix P and N hosts, in the root namespace: bridge `Pbr` (no IP
address) and, per host i, veth `Pv{i}` attached to it; its peer is `eth0` in
namespace `P{i}` with address SUBNET.{i+1}/24, and `lo` is up there. Every
host-to-host packet crosses two shaped egress queues: `eth0` in the sender's
namespace and `Pv{i}` of the receiver (the bridge side). Both are tbf queues
at `rate`, so each host's link is limited to `rate` in each direction.

The delay: `delay_ms` is the one-way delay added between two hosts, half on
each of those two queues (a netem qdisc with the tbf beneath it), so the RTT
grows by 2 x delay_ms. Kernels without the netem qdisc ("Specified qdisc kind
is unknown") cannot add a delay: setup then warns on stderr and reports
"delay_applied": false with the reason; links are still rate-limited.

State: /run/ps-netns/P.json, written before anything is created, so that
teardown knows what may exist after a partial setup. Without that file,
teardown removes the namespaces named P<digits>, the links Pv<digits>,
Pp<digits> and the bridge Pbr. A prefix is a letter followed by up to 9
letters, digits or '_', and must not end in a digit (so that P<digits> names
only this prefix's hosts).
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

DEFAULT_SUBNET = "10.77.0"
STATE_DIR = "/run/ps-netns"
MAX_HOSTS = 99
_PREFIX_RE = re.compile(r"^[A-Za-z]([A-Za-z0-9_]{0,8}[A-Za-z_])?$")
_MEASURE_PORT = 47001
_RATE_RE = re.compile(r"^(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit|tbit|bps|kbps|mbps|gbps|tbps)?$")
# Bits per second of each tc unit ("bps" in tc means bytes per second).
_RATE_UNITS = {None: 1, "bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12,
               "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9, "tbps": 8e12}


class NetnsError(RuntimeError):
    """A command failed or the arguments are invalid; the message names which."""


class Hosts(list):
    """setup()'s result: a list of {"ns": name, "ip": address}, one per host,
    with `info`, the dict `netns.py up` prints (rate, delay_applied, rtt...)."""

    def __init__(self, hosts, info):
        super().__init__(hosts)
        self.info = info


# ---- commands --------------------------------------------------------------

def _tool(name):
    path = shutil.which(name) or next(
        (p for p in (f"/usr/sbin/{name}", f"/sbin/{name}", f"/usr/bin/{name}") if os.path.exists(p)), None)
    if path is None:
        raise NetnsError(f"'{name}' not found (install iproute2)")
    return path


def _run(argv, check=True, timeout=30):
    """Runs argv; raises NetnsError naming the command and its stderr."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError as e:
        raise NetnsError(f"`{' '.join(argv)}`: {e}") from e
    except subprocess.TimeoutExpired as e:
        raise NetnsError(f"`{' '.join(argv)}` did not finish within {timeout} s") from e
    if check and proc.returncode != 0:
        raise NetnsError(f"`{' '.join(argv)}` failed (exit {proc.returncode}): {proc.stderr.strip()}")
    return proc


def _ip(*args, check=True):
    return _run([_tool("ip"), *args], check=check)


def _tc(*args, check=True):
    return _run([_tool("tc"), *args], check=check)


def run_in(ns, argv, **kwargs):
    """Runs argv inside namespace `ns` (ip netns exec) and returns the
    subprocess.CompletedProcess; keyword arguments go to subprocess.run."""
    return subprocess.run([_tool("ip"), "netns", "exec", ns, *argv], **kwargs)


def popen_in(ns, argv, **kwargs):
    """Starts argv inside namespace `ns` and returns the subprocess.Popen."""
    return subprocess.Popen([_tool("ip"), "netns", "exec", ns, *argv], **kwargs)


# ---- names and state -----------------------------------------------------------

def _check_prefix(prefix):
    if not isinstance(prefix, str) or not _PREFIX_RE.match(prefix):
        raise NetnsError(f"prefix {prefix!r}: must be a letter, then up to 9 letters, digits or '_', "
                         "not ending in a digit")


def _names(prefix, i):
    return {"ns": f"{prefix}{i}", "veth": f"{prefix}v{i}", "peer": f"{prefix}p{i}"}


def _bridge(prefix):
    return f"{prefix}br"


def _state_path(prefix):
    return os.path.join(STATE_DIR, f"{prefix}.json")


def _write_state(prefix, state):
    os.makedirs(STATE_DIR, exist_ok=True)
    tmp = _state_path(prefix) + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
    os.replace(tmp, _state_path(prefix))


def _read_state(prefix):
    try:
        with open(_state_path(prefix)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _ip_json(*args):
    """What `ip -j ARGS` prints, parsed: a list of objects (empty when ip
    prints nothing, as `ip -j netns list` does with no namespaces)."""
    out = _ip("-j", *args, check=False).stdout.strip()
    try:
        return json.loads(out) if out else []
    except ValueError as e:
        raise NetnsError(f"ip -j {' '.join(args)} printed what is not JSON ({e}): {out[:200]}") from None


def _namespaces():
    return [n["name"] for n in _ip_json("netns", "list") if "name" in n]


def _links():
    return [link["ifname"] for link in _ip_json("link", "show") if "ifname" in link]


def leftovers(prefix):
    """Namespaces and root-namespace links of `prefix` that exist now."""
    _check_prefix(prefix)
    ns_re = re.compile(rf"^{re.escape(prefix)}\d+$")
    link_re = re.compile(rf"^{re.escape(prefix)}([vp]\d+|br)$")
    return ([n for n in _namespaces() if ns_re.match(n)] + [l for l in _links() if link_re.match(l)])


def parse_rate(rate):
    """Bits per second of a tc rate such as "1gbit", "100mbit", "10mbps"."""
    m = _RATE_RE.match(str(rate).strip().lower())
    if not m:
        raise NetnsError(f"rate {rate!r}: expected a number and a tc unit (bit, kbit, mbit, gbit, bps, ...)")
    return float(m.group(1)) * _RATE_UNITS[m.group(2)]


# ---- shaping -------------------------------------------------------------------

def _tbf_args(rate_bps):
    # The bucket must hold at least one GSO super-packet (64 KiB) and about a
    # millisecond of traffic; the queue holds about 20 ms at the rate.
    burst = max(2 * 65536, int(rate_bps / 8 / 1000))
    limit = max(4 * burst, int(rate_bps / 8 * 0.02))
    return ["tbf", "rate", f"{int(rate_bps)}bit", "burst", str(burst), "limit", str(limit)]


def _shape(tc_prefix, dev, rate_bps, delay_ms, try_delay):
    """Shapes `dev`'s egress. Returns None when a delay was applied (or none
    was asked), else the reason it could not be."""
    reason = None
    if try_delay and delay_ms > 0:
        half_us = max(1, int(round(delay_ms * 1000 / 2)))
        proc = _tc(*tc_prefix, "qdisc", "add", "dev", dev, "root", "handle", "1:", "netem",
                   "delay", f"{half_us}us", check=False)
        if proc.returncode == 0:
            _tc(*tc_prefix, "qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:", *_tbf_args(rate_bps))
            return None
        reason = (f"`tc qdisc add dev {dev} root netem delay {half_us}us` failed: {proc.stderr.strip()} "
                  "(this kernel has no netem qdisc)")
    elif delay_ms > 0:
        reason = "netem unavailable (see the first link)"
    _tc(*tc_prefix, "qdisc", "add", "dev", dev, "root", "handle", "1:", *_tbf_args(rate_bps))
    return reason


# ---- measurement ---------------------------------------------------------------

# The measurement's two ends and the reachability probe run inside the
# namespaces as this same file's hidden subcommands (_peer, _client, _reach;
# see _INTERNAL below).

def _self(*args):
    return [sys.executable, os.path.abspath(__file__), *map(str, args)]


def _peer(ip, port):
    """The far end: echoes 1-byte pings until "B", then takes a bulk
    transfer (its length first, 8 bytes) and acknowledges it."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((ip, int(port)))
    s.listen(1)
    s.settimeout(20)
    print("ready", flush=True)
    c, _ = s.accept()
    c.settimeout(20)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while True:
        b = c.recv(1)
        if not b or b == b"B":
            break
        c.sendall(b)
    n, got = int.from_bytes(c.recv(8, socket.MSG_WAITALL), "little"), 0
    while got < n:
        d = c.recv(1 << 20)
        if not d:
            break
        got += len(d)
    c.sendall(b"k")
    c.close()
    return 0


def _client(ip, port, rounds, nbytes):
    """The near end: `rounds` pings (after 20 unmeasured), then `nbytes` in
    bulk; prints the RTT and bandwidth as JSON."""
    rounds, nbytes = int(rounds), int(nbytes)
    c = socket.create_connection((ip, int(port)), timeout=20)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rtts = []
    for i in range(rounds + 20):
        t = time.perf_counter()
        c.sendall(b"p")
        c.recv(1)
        if i >= 20:
            rtts.append((time.perf_counter() - t) * 1e6)
    c.sendall(b"B")
    c.sendall(nbytes.to_bytes(8, "little"))
    buf, left, t = b"\0" * (1 << 20), nbytes, time.perf_counter()
    while left > 0:
        left -= c.send(buf[:min(left, len(buf))])
    c.recv(1)
    dt = time.perf_counter() - t
    rtts.sort()
    print(json.dumps({"rtt_p50_us": round(statistics.median(rtts), 1), "rtt_min_us": round(rtts[0], 1),
                      "bandwidth_mbit": round(nbytes * 8 / dt / 1e6, 1), "bulk_bytes": nbytes}))
    return 0


def _reach(timeout, *ips):
    """Waits until each of `ips` answers a TCP connection (an RST counts:
    it is reachable); exits naming the first that does not in time."""
    deadline = time.time() + float(timeout)
    for ip in ips:
        while True:
            try:
                socket.create_connection((ip, 9), timeout=1).close()
                break
            except ConnectionRefusedError:
                break
            except OSError as e:
                if time.time() > deadline:
                    sys.exit(f"{ip}: {e}")
                time.sleep(0.05)
    return 0


_INTERNAL = {"_peer": _peer, "_client": _client, "_reach": _reach}


def _ping_pong(server_ns, server_ip, client_ns, rounds, nbytes):
    """RTT (1-byte TCP ping-pong in Python) and one-way bulk bandwidth from
    client_ns to server_ip in server_ns."""
    peer = popen_in(server_ns, _self("_peer", server_ip, _MEASURE_PORT),
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if peer.stdout.readline().strip() != "ready":
            raise NetnsError(f"measurement peer in {server_ns} did not start: {peer.stderr.read().strip()}")
        proc = run_in(client_ns, _self("_client", server_ip, _MEASURE_PORT, rounds, nbytes),
                      capture_output=True, text=True, timeout=60)
        if proc.returncode != 0:
            raise NetnsError(f"measurement from {client_ns} to {server_ip} failed: {proc.stderr.strip()}")
        return json.loads(proc.stdout)
    finally:
        if peer.poll() is None:
            peer.kill()
        peer.wait()


def measure(hosts, rate_bps, rounds=300):
    """Measures the emulated network between hosts[0] and hosts[1]: RTT and
    bandwidth across the bridge, and the same ping-pong over hosts[0]'s own
    loopback (the cost of the Python measurement itself)."""
    nbytes = int(min(256 << 20, max(1 << 20, rate_bps / 8 * 0.5)))  # about 0.5 s at the rate
    link = _ping_pong(hosts[1]["ns"], hosts[1]["ip"], hosts[0]["ns"], rounds, nbytes)
    local = _ping_pong(hosts[0]["ns"], "127.0.0.1", hosts[0]["ns"], rounds, 1 << 20)
    return {"measured_between": [hosts[0]["ns"], hosts[1]["ns"]],
            "rtt_p50_us": link["rtt_p50_us"], "rtt_min_us": link["rtt_min_us"],
            "bandwidth_mbit": link["bandwidth_mbit"], "bulk_bytes": link["bulk_bytes"],
            "loopback_rtt_p50_us": local["rtt_p50_us"],
            "rtt_method": "1-byte TCP ping-pong in Python, median of %d; loopback_rtt_p50_us is the "
                          "same over lo inside one namespace (the measurement's own cost)" % rounds}


# ---- setup and teardown -----------------------------------------------------------

def check():
    """None when namespaces, veths and bridges can be made here, else the reason."""
    if os.geteuid() != 0:
        return f"not root (euid {os.geteuid()}): network namespaces need CAP_SYS_ADMIN"
    try:
        _tool("ip")
        _tool("tc")
    except NetnsError as e:
        return str(e)
    probe = f"psnchk{os.getpid()}"
    try:
        _ip("netns", "add", probe)
        try:
            _ip("link", "add", f"{probe}a", "type", "veth", "peer", "name", f"{probe}b")
            _ip("link", "set", f"{probe}b", "netns", probe)
            _ip("link", "del", f"{probe}a")
        finally:
            _ip("netns", "del", probe, check=False)
            _ip("link", "del", f"{probe}a", check=False)
    except NetnsError as e:
        return f"cannot make namespaces or veth links: {e}"
    return None


def setup(prefix: str, hosts: int, rate: str = "1gbit", delay_ms: float = 0.2,
          subnet: str = DEFAULT_SUBNET, measure_network: bool = True) -> list:
    """Creates namespaces {prefix}{i} for i in range(hosts) on bridge
    {prefix}br, each with eth0 = {subnet}.{i+1}/24 and links shaped to `rate`
    each way, one-way delay `delay_ms` between two hosts where netem exists.
    Returns a Hosts list of {"ns", "ip"} (with .info). On any failure it
    removes what it made and raises NetnsError naming the failing command."""
    _check_prefix(prefix)
    if not isinstance(hosts, int) or not 1 <= hosts <= MAX_HOSTS:
        raise NetnsError(f"hosts {hosts!r}: must be an integer in [1, {MAX_HOSTS}]")
    if not re.match(r"^\d{1,3}\.\d{1,3}\.\d{1,3}$", subnet):
        raise NetnsError(f"subnet {subnet!r}: expected the first three octets, e.g. {DEFAULT_SUBNET}")
    rate_bps = parse_rate(rate)
    if delay_ms < 0:
        raise NetnsError(f"delay_ms {delay_ms}: must be >= 0")
    reason = check()
    if reason:
        raise NetnsError(reason)
    existing = leftovers(prefix)
    if existing or _read_state(prefix):
        raise NetnsError(f"prefix {prefix!r} is in use ({', '.join(existing) or _state_path(prefix)}); "
                         f"run `netns.py down --prefix {prefix}` first")
    _write_state(prefix, {"prefix": prefix, "hosts": hosts, "subnet": subnet, "rate": rate,
                          "delay_ms": delay_ms, "complete": False})
    try:
        return _build(prefix, hosts, rate, rate_bps, delay_ms, subnet, measure_network)
    except BaseException as e:
        try:
            teardown(prefix)
        except NetnsError as cleanup_error:
            print(f"netns.py: cleanup after a failed setup: {cleanup_error}", file=sys.stderr)
        if isinstance(e, NetnsError):
            raise NetnsError(f"setup of {prefix!r} failed and was undone: {e}") from None
        raise


def _build(prefix, count, rate, rate_bps, delay_ms, subnet, measure_network):
    bridge = _bridge(prefix)
    _ip("link", "add", bridge, "type", "bridge")
    _ip("link", "set", bridge, "up")
    hosts = []
    for i in range(count):
        n = _names(prefix, i)
        addr = f"{subnet}.{i + 1}"
        _ip("netns", "add", n["ns"])
        _ip("link", "add", n["veth"], "type", "veth", "peer", "name", n["peer"])
        _ip("link", "set", n["peer"], "netns", n["ns"])
        _ip("link", "set", n["veth"], "master", bridge)
        _ip("link", "set", n["veth"], "up")
        _ip("-n", n["ns"], "link", "set", n["peer"], "name", "eth0")
        _ip("-n", n["ns"], "addr", "add", f"{addr}/24", "dev", "eth0")
        _ip("-n", n["ns"], "link", "set", "eth0", "up")
        _ip("-n", n["ns"], "link", "set", "lo", "up")
        hosts.append({"ns": n["ns"], "ip": addr})
    delay_error = None
    for i in range(count):
        n = _names(prefix, i)
        # Only the first link tries netem; where it is missing, the rest
        # would fail the same way.
        try_delay = delay_error is None
        r1 = _shape(["-n", n["ns"]], "eth0", rate_bps, delay_ms, try_delay)
        r2 = _shape([], n["veth"], rate_bps, delay_ms, try_delay and r1 is None)
        delay_error = delay_error or r1 or r2
    delay_applied = delay_ms == 0 or delay_error is None
    if not delay_applied:
        print(f"netns.py: WARNING: links are rate-limited to {rate} but the {delay_ms} ms delay could NOT be "
              f"applied: {delay_error}", file=sys.stderr)
    info = {"prefix": prefix, "bridge": _bridge(prefix), "subnet": f"{subnet}.0/24", "hosts": hosts,
            "rate": rate, "rate_bps": int(rate_bps), "shaping": "tbf on each host's eth0 egress and on its "
            "bridge-side veth egress", "delay_ms": delay_ms, "delay_applied": delay_applied,
            "delay_error": delay_error}
    _wait_reachable(hosts)
    if measure_network and count >= 2:
        info.update(measure(hosts, rate_bps))
    state = _read_state(prefix) or {}
    state.update({"complete": True, "info": info})
    _write_state(prefix, state)
    return Hosts(hosts, info)


def _wait_reachable(hosts, timeout=10.0):
    """Waits until hosts[0] reaches every other host (bridge ports forwarding,
    neighbours resolvable); raises NetnsError naming the unreachable host."""
    if len(hosts) < 2:
        return
    proc = run_in(hosts[0]["ns"], _self("_reach", timeout, *[h["ip"] for h in hosts[1:]]),
                  capture_output=True, text=True, timeout=timeout + 30)
    if proc.returncode != 0:
        raise NetnsError(f"from {hosts[0]['ns']}, a host is unreachable: {proc.stderr.strip()} (where "
                         "br_netfilter is loaded, bridged packets pass the root namespace's iptables FORWARD "
                         "chain: check its policy, or net.bridge.bridge-nf-call-iptables)")


def teardown(prefix: str) -> None:
    """Removes every namespace, veth and the bridge of `prefix` and its state
    file. Idempotent; works after a partial setup. Raises NetnsError naming
    what could not be removed."""
    _check_prefix(prefix)
    state = _read_state(prefix) or {}
    recorded = {_names(prefix, i)["ns"] for i in range(int(state.get("hosts", 0)))}
    ns_re = re.compile(rf"^{re.escape(prefix)}\d+$")
    namespaces = sorted({n for n in leftovers(prefix) if ns_re.match(n)} | (recorded & set(_namespaces())))
    for ns in namespaces:
        _ip("netns", "del", ns, check=False)
    # A namespace some process still holds outlives its name, and with it the
    # veth pair: delete the root ends explicitly.
    for link in leftovers(prefix):
        if link not in namespaces:
            _ip("link", "del", link, check=False)
    try:
        os.unlink(_state_path(prefix))
    except FileNotFoundError:
        pass
    left = leftovers(prefix)
    if left:
        raise NetnsError(f"teardown of {prefix!r} left: {', '.join(left)}")


# ---- context manager ------------------------------------------------------------

class _Signals:
    """Turns SIGINT/SIGTERM into exceptions while active (main thread only),
    so that `finally` blocks and __exit__ run and clean up."""

    def __enter__(self):
        self.old = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.old[sig] = signal.signal(sig, _raise_on_signal)
        return self

    def __exit__(self, *exc):
        for sig, handler in self.old.items():
            signal.signal(sig, handler)
        return False


def _raise_on_signal(signum, frame):
    # Cleanup must not be interrupted by a second signal.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise SystemExit(128 + signum)


class Network:
    """`with Network(prefix, hosts, rate=..., delay_ms=...) as hosts:` sets
    the network up and tears it down on leaving the block, on an exception,
    and on SIGINT/SIGTERM (turned into KeyboardInterrupt / SystemExit while
    the block runs). `hosts` is setup()'s result; `.info` as well."""

    def __init__(self, prefix, hosts, rate="1gbit", delay_ms=0.2, subnet=DEFAULT_SUBNET,
                 measure_network=True):
        self.args = (prefix, hosts, rate, delay_ms, subnet, measure_network)
        self.prefix = prefix
        self.hosts = None
        self._signals = _Signals()

    def __enter__(self):
        self._signals.__enter__()
        try:
            self.hosts = setup(*self.args)
        except BaseException:
            self._signals.__exit__(None, None, None)
            raise
        return self.hosts

    def __exit__(self, *exc):
        try:
            for sig in self._signals.old:  # cleanup must not be interrupted
                signal.signal(sig, signal.SIG_IGN)
            teardown(self.prefix)
        finally:
            self._signals.__exit__(None, None, None)
        return False


# ---- command line ---------------------------------------------------------------

def _add_network_args(p):
    p.add_argument("--prefix", required=True, help="namespace prefix (hosts are PREFIX0, PREFIX1, ...)")
    p.add_argument("--hosts", type=int, required=True, help="number of hosts")
    p.add_argument("--rate", default="1gbit", help="each link's rate per direction, tc syntax (default 1gbit)")
    p.add_argument("--delay-ms", type=float, default=0.2,
                   help="one-way delay between two hosts in ms (needs netem; default 0.2)")
    p.add_argument("--subnet", default=DEFAULT_SUBNET, help=f"first three octets (default {DEFAULT_SUBNET})")
    p.add_argument("--no-measure", action="store_true", help="skip the RTT and bandwidth measurement")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in _INTERNAL:  # this file run inside a namespace by itself
        return _INTERNAL[argv[0]](*argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("check", help="exit 0 when namespaces can be made here, else 1 naming why")
    _add_network_args(sub.add_parser("up", help="create the network and print it as JSON"))
    down = sub.add_parser("down", help="remove the network of a prefix")
    down.add_argument("--prefix", required=True)
    run = sub.add_parser("run", help="up, run a command in the root namespace, down")
    _add_network_args(run)
    run.add_argument("cmd", nargs=argparse.REMAINDER, help="-- COMMAND [ARG ...]")
    args = parser.parse_args(argv)
    try:
        if args.command == "check":
            reason = check()
            print(f"netns.py check: {reason or 'ok'}", file=sys.stderr if reason else sys.stdout)
            return 1 if reason else 0
        if args.command == "down":
            teardown(args.prefix)
            return 0
        if args.command == "up":
            with _Signals():
                hosts = setup(args.prefix, args.hosts, args.rate, args.delay_ms, args.subnet, not args.no_measure)
            print(json.dumps(hosts.info), flush=True)
            return 0
        cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
        if not cmd:
            parser.error("run: no command given (netns.py run --prefix P --hosts N -- COMMAND ...)")
        return _run_command(args, cmd)
    except NetnsError as e:
        print(f"netns.py {args.command}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"netns.py {args.command}: interrupted; cleaned up", file=sys.stderr)
        return 130


def _run_command(args, cmd):
    with Network(args.prefix, args.hosts, args.rate, args.delay_ms, args.subnet, not args.no_measure) as hosts:
        print(json.dumps(dict(hosts.info, bench="netns")), flush=True)
        child = subprocess.Popen(cmd)
        try:
            return child.wait()
        finally:
            if child.poll() is None:
                child.terminate()
                try:
                    child.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()


if __name__ == "__main__":
    sys.exit(main())
