#!/usr/bin/env bash
# Two "hosts" on this machine, for multi-node runs over a real network, as a cluster node has them: two network
# namespaces joined by two veth pairs, a management network `mgmt0` (10.77.0.1 and .2; each host's name resolves
# there) and a training network `train0` (10.78.0.1 and .2, the second NIC training traffic should take), each
# host with its own loopback (no shortcut between the two) and, for each command run in it, its own host name (a
# UTS namespace): host0 and host1, in each host's /etc/hosts, and half of this machine's cores (taskset). The
# filesystem stays shared, as a cluster's shared storage would be. Needs root (ip netns, unshare); everything it
# makes is named after NAME and removed by `down`. The addresses exist only inside the two namespaces, so several
# pairs (other NAMEs) can use them at once.
#
#   scripts/two_hosts.sh up NAME               # make host0 and host1
#   scripts/two_hosts.sh exec NAME I CMD...    # run CMD on host I (0 or 1), on its half of the cores
#   scripts/two_hosts.sh addr NAME I [NET]     # host I's address on NET (mgmt0 or train0; default train0)
#   scripts/two_hosts.sh kill NAME I           # SIGKILL every process on host I
#   scripts/two_hosts.sh link NAME I up|down   # host I's cables (both networks) in or out
#   scripts/two_hosts.sh bytes NAME I [NET]    # bytes host I sent on NET so far
#   scripts/two_hosts.sh down NAME             # kill what runs on both hosts, remove them
#
# A two-node SFT on them (the run folder on the shared filesystem; node 0's training address is the rendezvous
# endpoint, and the ranks talk over train0):
#   scripts/two_hosts.sh up bed
#   for i in 0 1; do scripts/two_hosts.sh exec bed $i env COSMOS_TRAIN__LAUNCH__NODE_RANK=$i \
#     cosmos-train sft --config configs/tiny-sft.toml --set launch.nnodes=2 --set launch.nproc_per_node=1 \
#     --set launch.rdzv_endpoint='"10.78.0.1:29500"' --set launch.rdzv_id='"bed-1"' \
#     --set launch.socket_ifname='"train0"' & done; wait
#   scripts/two_hosts.sh down bed
set -euo pipefail

cmd=${1:?usage: two_hosts.sh up|exec|addr|kill|link|bytes|down NAME ...}
name=${2:?NAME: a short name for this pair of hosts (at most 12 characters)}
if ((${#name} > 12)); then
    echo "two_hosts.sh: NAME '$name' is longer than 12 characters (interface names are at most 15)" >&2
    exit 2
fi
ns() { echo "$name-$1"; }
declare -A PREFIX=([mgmt0]=10.77.0 [train0]=10.78.0)

case $cmd in
up)
    for i in 0 1; do
        ip netns add "$(ns $i)"
        ip -n "$(ns $i)" link set lo up
    done
    for net in mgmt0 train0; do
        a="$name${net:0:1}0" b="$name${net:0:1}1" # e.g. bedm0 / bedm1 until moved and renamed
        ip link add "$a" type veth peer name "$b"
        for i in 0 1; do
            end="$name${net:0:1}$i"
            ip link set "$end" netns "$(ns $i)"
            ip -n "$(ns $i)" link set "$end" name "$net"
            ip -n "$(ns $i)" addr add "${PREFIX[$net]}.$((i + 1))/24" dev "$net"
            ip -n "$(ns $i)" link set "$net" up
        done
    done
    for i in 0 1; do
        # `ip netns exec` mounts /etc/netns/<ns>/hosts over /etc/hosts for the commands it runs
        mkdir -p "/etc/netns/$(ns $i)"
        printf '127.0.0.1 localhost\n%s.1 host0\n%s.2 host1\n' "${PREFIX[mgmt0]}" "${PREFIX[mgmt0]}" \
            >"/etc/netns/$(ns $i)/hosts"
    done
    ;;
exec)
    i=${3:?I: 0 or 1}
    shift 3
    # each host computes on its own half of this machine's cores (a thread count a process derives from its cores,
    # as the rollout engine's does, is then what it would be on its own machine); TWO_HOSTS_CORES=all: every core
    cores=$(nproc --all)
    if [ "${TWO_HOSTS_CORES:-half}" = all ] || ((cores < 2)); then
        pin=(taskset -c "0-$((cores - 1))")
    else
        half=$((cores / 2))
        pin=(taskset -c "$((i * half))-$((i * half + half - 1))")
    fi
    exec ip netns exec "$(ns "$i")" unshare --uts -- "${pin[@]}" sh -c 'hostname "$0" && exec "$@"' "host$i" "$@"
    ;;
addr)
    echo "${PREFIX[${4:-train0}]}.$((${3:?I: 0 or 1} + 1))"
    ;;
bytes)
    ip netns exec "$(ns "${3:?I: 0 or 1}")" cat "/sys/class/net/${4:-train0}/statistics/tx_bytes"
    ;;
kill)
    pids=$(ip netns pids "$(ns "${3:?I: 0 or 1}")")
    if [ -n "$pids" ]; then kill -9 $pids 2>/dev/null || true; fi
    ;;
link)
    for net in mgmt0 train0; do ip -n "$(ns "${3:?I: 0 or 1}")" link set "$net" "${4:?up or down}"; done
    ;;
down)
    for i in 0 1; do
        if ip netns list | grep -qw "$(ns $i)"; then
            pids=$(ip netns pids "$(ns $i)")
            if [ -n "$pids" ]; then kill -9 $pids 2>/dev/null || true; fi
            ip netns del "$(ns $i)"
        fi
        rm -rf "/etc/netns/$(ns $i)"
    done
    ;;
*)
    echo "two_hosts.sh: unknown command '$cmd' (up, exec, addr, kill, link, bytes, down)" >&2
    exit 2
    ;;
esac
