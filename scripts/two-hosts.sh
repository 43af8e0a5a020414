#!/usr/bin/env bash
# The demo's processes as two emulated hosts on this machine, then the link between them cut.
#
# Each "host" is its own network, UTS (hostname) and IPC (System V shared memory) namespace;
# the two are joined by a veth pair (10.250.0.1 on host-a, 10.250.0.2 on host-b — addresses that
# exist only inside the namespaces this script makes and removes). Within a host UCX sees the
# same hostname and IPC namespace and uses shared memory; between hosts it can only use TCP on
# the veth addresses. Halfway through, the veth link is taken down: every pair across it must
# see PeerDown on both sides (printed: the time from the cut to each PeerDown), every pair
# within a host must finish exactly once, and nothing may be misdelivered.
#
# --heal: the recovery job instead (`tagspace-demo faults`): a round of messages, the link cut
# for --away seconds (default 15), then back up; every pair across must see PeerDown, then
# PeerUp again with nobody reconnecting by hand (the nodes dial back the peers they lost), and
# a second round must arrive exactly once. The verdict line starts with OK.
#
#   scripts/two-hosts.sh [--procs N] [--messages M] [--no-cut | --heal [--away S]] [--ucx bundled|system|wheel]
#
# Needs root (ip netns, unshare, nsenter); without it, says so and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."
procs=4 messages=200 cut=1 heal=0 away=15 ucx=bundled
while [ $# -gt 0 ]; do
  case "$1" in
    --procs) procs=$2; shift ;;
    --messages) messages=$2; shift ;;
    --no-cut) cut=0 ;;
    --heal) heal=1 ;;
    --away) away=$2; shift ;;
    --ucx) ucx=$2; shift ;;
    *) echo "usage: scripts/two-hosts.sh [--procs N] [--messages M] [--no-cut | --heal [--away S]] [--ucx bundled|system|wheel]" >&2; exit 2 ;;
  esac
  shift
done
if [ "$(id -u)" -ne 0 ]; then
  echo "two-hosts: SKIPPED: needs root for network, UTS and IPC namespaces"
  exit 0
fi
for tool in ip unshare nsenter; do
  command -v "$tool" >/dev/null || { echo "two-hosts: SKIPPED: '$tool' is missing (apt: iproute2, util-linux)"; exit 0; }
done

cargo build --release -q -p tagspace-ucx --bin tagspace-demo
libdir=$(scripts/ucx-lib.sh "$ucx")

id=$$
dir=$(mktemp -d /tmp/tagspace-two-hosts.XXXXXX)
nsa=ts-a-$id nsb=ts-b-$id va=tsa$id vb=tsb$id
cleanup() {
  for f in "$dir"/uts-* "$dir"/ipc-*; do [ -e "$f" ] && umount "$f" 2>/dev/null; done
  umount "$dir" 2>/dev/null || true
  ip netns del "$nsa" 2>/dev/null || true
  ip netns del "$nsb" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

ip netns add "$nsa"
ip netns add "$nsb"
ip link add "$va" type veth peer name "$vb"
ip link set "$va" netns "$nsa"
ip link set "$vb" netns "$nsb"
ip -n "$nsa" addr add 10.250.0.1/24 dev "$va"
ip -n "$nsb" addr add 10.250.0.2/24 dev "$vb"
for ns in "$nsa" "$nsb"; do
  ip -n "$ns" link set lo up
  # How long a host's TCP keeps retransmitting unacknowledged data before it fails the
  # connection (Linux default 15: about 15 minutes). A cut link with data in flight is noticed
  # this way — TCP keepalive and UCX's keepalive only probe idle connections.
  ip netns exec "$ns" sysctl -q -w net.ipv4.tcp_retries2="${TCP_RETRIES2:-5}"
done
ip -n "$nsa" link set "$va" up
ip -n "$nsb" link set "$vb" up

# Persistent UTS and IPC namespaces, one pair per host (bind-mounted on files in a private
# mount, so that every process of a host can enter the same ones).
mount --bind "$dir" "$dir"
mount --make-private "$dir"
for h in 0 1; do
  touch "$dir/uts-$h" "$dir/ipc-$h"
  unshare --uts="$dir/uts-$h" --ipc="$dir/ipc-$h" hostname "tagspace-host-$h"
done

# How the demo starts each process: HOST EXE ARGS… → in that host's namespaces, listening on
# its veth address, loading the chosen UCX.
cat >"$dir/spawn" <<SPAWN
#!/bin/sh
host=\$1; shift
if [ "\$host" = 0 ]; then ns=$nsa ip=10.250.0.1; else ns=$nsb ip=10.250.0.2; fi
export LD_LIBRARY_PATH="$libdir"
[ -n "\$LD_LIBRARY_PATH" ] || unset LD_LIBRARY_PATH
# ip netns exec, not nsenter --net: it also mounts the namespace's own /sys, where UCX looks
# for network devices (with the host's /sys it finds none that exist there and cannot connect).
exec ip netns exec \$ns nsenter --uts="$dir/uts-\$host" --ipc="$dir/ipc-\$host" -- "\$@" --listen \$ip
SPAWN
chmod +x "$dir/spawn"

args=(--procs "$procs" --messages "$messages" --transport shm --hosts 2 --spawn-via "$dir/spawn")
if [ "$heal" -eq 1 ]; then
  [ "$messages" -le 10000 ] || args[3]=10000
  args=(faults "${args[@]}" --away "$away" --cut-link "ip -n $nsa link set $va down"
    --heal-link "ip -n $nsa link set $va up")
elif [ "$cut" -eq 1 ]; then
  args+=(--cut-link "ip -n $nsa link set $va down")
fi
echo "two hosts: processes 0..$((procs / 2 - 1)) on tagspace-host-0 (10.250.0.1), the rest on tagspace-host-1 (10.250.0.2)"
# An idle connection across the cut is noticed by TCP keepalive (UCX sets it on its sockets):
# after KEEPIDLE, KEEPCNT probes KEEPINTVL apart.
export UCX_TCP_KEEPIDLE=${UCX_TCP_KEEPIDLE:-2s} UCX_TCP_KEEPINTVL=${UCX_TCP_KEEPINTVL:-1s} UCX_TCP_KEEPCNT=${UCX_TCP_KEEPCNT:-3}
LD_LIBRARY_PATH=$libdir target/release/tagspace-demo "${args[@]}"
