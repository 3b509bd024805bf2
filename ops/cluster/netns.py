"""Hosts on one machine for the cluster test and the cluster benchmarks: network namespaces on
a bridge (ip netns + veth), addresses in 127.x/8 with route_localnet, so nothing can leave the
machine. Used by tests/cluster/test_cluster_netns.py and ops/cluster/sim_netns.py. Needs root.

    hosts = Netns("llb123")              # names: llb123hub (the bridge), then yours
    hosts.check()                        # False (and why) when namespaces cannot be made
    hosts.network()                      # the hub namespace with its bridge
    hosts.add("llb123n1", "127.77.0.1")  # a host on the bridge
    hosts.popen("llb123n1", [argv], log=f, env=...)   # a process inside it
    hosts.teardown()                     # every namespace made, in reverse
"""
import subprocess


def sh(*args, check=True, **kw):
    return subprocess.run(list(args), check=check, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


class Netns:
    def __init__(self, tag):
        self.tag = tag
        self.hub = f"{tag}hub"
        self.namespaces = []

    def check(self):
        """(True, "") when a namespace can be made here, else (False, the reason)."""
        import os
        if os.geteuid() != 0:
            return False, "network namespaces need root"
        r = sh("ip", "netns", "add", f"{self.tag}probe", check=False)
        if r.returncode != 0:
            return False, f"cannot create a network namespace: {r.stdout.strip()}"
        sh("ip", "netns", "del", f"{self.tag}probe", check=False)
        return True, ""

    def network(self):
        sh("ip", "netns", "add", self.hub)
        self.namespaces.append(self.hub)
        sh("ip", "-n", self.hub, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.hub, "link", "set", "br0", "up")

    def add(self, name, addr):
        """A namespace `name` with `addr`/24 on a veth to the hub's bridge."""
        idx = len(self.namespaces)
        sh("ip", "netns", "add", name)
        self.namespaces.append(name)
        veth, peer = f"{self.tag}v{idx}", f"{self.tag}h{idx}"
        sh("ip", "link", "add", veth, "netns", name, "type", "veth", "peer", "name", peer, "netns", self.hub)
        sh("ip", "-n", self.hub, "link", "set", peer, "master", "br0")
        sh("ip", "-n", self.hub, "link", "set", peer, "up")
        sh("ip", "-n", name, "link", "set", "lo", "up")
        sh("ip", "-n", name, "link", "set", veth, "up")
        # 127/8 on a real interface: the kernel routes it only with route_localnet
        sh("ip", "netns", "exec", name, "sysctl", "-qw", "net.ipv4.conf.all.route_localnet=1",
           f"net.ipv4.conf.{veth}.route_localnet=1")
        sh("ip", "-n", name, "addr", "add", f"{addr}/24", "dev", veth)

    def popen(self, name, argv, log, env=None):
        """argv inside namespace `name`, its own session (killpg ends it and its children)."""
        return subprocess.Popen(["ip", "netns", "exec", name] + list(argv), env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)

    def run(self, name, *args, timeout=60):
        return sh("ip", "netns", "exec", name, *args, check=False, timeout=timeout)

    def pids(self, name):
        r = sh("ip", "netns", "pids", name, check=False)
        return [int(p) for p in r.stdout.split() if p.strip().isdigit()]

    def teardown(self):
        for name in reversed(self.namespaces):
            sh("ip", "netns", "del", name, check=False)
        self.namespaces = []
