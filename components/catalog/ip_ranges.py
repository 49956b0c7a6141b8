"""IPv4 ranges: the private ranges a VPC subnet accepts, and how many public addresses a set of ranges opens.

Pure Python.
"""

from __future__ import annotations

import ipaddress

__all__ = ["MAX_PUBLIC_AUTHORIZED_ADDRESSES", "PRIVATE_RANGES", "public_addresses"]

# https://cloud.google.com/vpc/docs/subnets#valid-ranges : the private ranges a subnet (and its secondary ranges)
# may use without privately-used-public-IP configuration, which tpuray does not declare.
PRIVATE_RANGES = tuple(
    ipaddress.ip_network(n)
    for n in (
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "100.64.0.0/10",
        "192.0.0.0/24",
        "192.0.2.0/24",
        "198.18.0.0/15",
        "198.51.100.0/24",
        "203.0.113.0/24",
        "240.0.0.0/4",
    )
)


# Judge the union, not each literal: 0.0.0.0/1 plus 128.0.0.0/1 opens the control plane as surely as 0.0.0.0/0.
# A public range wider than a /8's 16.7 million addresses is no "authorized network"
# (https://cloud.google.com/kubernetes-engine/docs/concepts/network-overview#limit-access-to-control-plane).
MAX_PUBLIC_AUTHORIZED_ADDRESSES = 2**24
_NON_PUBLIC = tuple(
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "224.0.0.0/4",
        "240.0.0.0/4",
    )
)


def public_addresses(cidrs: list[str]) -> int:
    """How many public IPv4 addresses the union of ``cidrs`` covers (overlaps counted once)."""
    nets = [ipaddress.ip_network(c, strict=False) for c in cidrs]
    union = list(ipaddress.collapse_addresses(n for n in nets if isinstance(n, ipaddress.IPv4Network)))
    total = 0
    for net in union:
        hidden = sum(
            min(int(net.broadcast_address), int(p.broadcast_address))
            - max(int(net.network_address), int(p.network_address))
            + 1
            for p in _NON_PUBLIC
            if net.overlaps(p)
        )
        total += net.num_addresses - hidden
    return total
