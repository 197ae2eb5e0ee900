#!/usr/bin/env bash
# One node of a multi-node cosmos-train job under Slurm: computes the variables every node of such a job gets
# (exactly the names of tests/two_hosts.py `node_env`, the COSMOS_TRAIN__* overrides the job config reads) from
# Slurm's own, then execs the command it is given with them. cosmos-train.sbatch runs it once per node through
# srun. It runs without Slurm too, given the SLURM_* variables it reads (here one node, host name given):
#
#   SLURM_JOB_ID=7 SLURM_NNODES=1 SLURM_NODEID=0 COSMOS_RDZV_HOST=$(hostname) COSMOS_SOCKET_IFNAME=lo \
#     COSMOS_RUNS_DIR=$PWD/outputs bash deployments/slurm/node.sh cosmos-train sft --config configs/tiny-sft.toml
#
# Read from Slurm: SLURM_NODEID (this node's index in the allocation; SLURM_PROCID when unset, the same with one
# task per node), SLURM_NNODES, SLURM_NTASKS (must equal SLURM_NNODES: one torchrun agent per node),
# SLURM_JOB_ID, SLURM_JOB_NODELIST (its first host, by `scontrol show hostnames`, is where the nodes meet: Slurm
# numbers the nodes in that list's order, so it is node 0).
# Settings (the user's, see cosmos-train.sbatch): COSMOS_SOCKET_IFNAME (the interface the nodes talk over),
# COSMOS_RUNS_DIR (the run folders' parent, on storage every node mounts), COSMOS_RDZV_PORT (default 29500),
# COSMOS_RDZV_HOST (optional: node 0's name or address on the training network, instead of its host name).
# The settings are removed before the command starts: it sees Slurm's variables and node_env's, nothing else of ours.
set -euo pipefail

die() {
    echo "node.sh: $*" >&2
    exit 2
}

[[ $# -gt 0 ]] || die "usage: node.sh COMMAND [ARGS...] (e.g. cosmos-train sft --config JOB.toml)"
[[ -n ${COSMOS_SOCKET_IFNAME:-} ]] ||
    die "COSMOS_SOCKET_IFNAME is not set: name the network interface the nodes talk over (\`ip -br addr\` on a node lists them; e.g. ib0, eth0)"
[[ -n ${COSMOS_RUNS_DIR:-} ]] ||
    die "COSMOS_RUNS_DIR is not set: the run folders' parent, on storage every node mounts at the same path"
nnodes=${SLURM_NNODES:?node.sh: SLURM_NNODES is not set (run it through srun, or set it)}
rank=${SLURM_NODEID:-${SLURM_PROCID:?node.sh: neither SLURM_NODEID nor SLURM_PROCID is set (run it through srun, or set one)}}
job_id=${SLURM_JOB_ID:?node.sh: SLURM_JOB_ID is not set (run it through srun, or set it)}
# Two tasks on one node would be two agents claiming one node rank: torchrun would wait for a node that never comes.
ntasks=${SLURM_NTASKS:-$nnodes}
[[ $ntasks == "$nnodes" ]] ||
    die "$ntasks tasks on $nnodes nodes: run one task per node (srun --ntasks-per-node=1); each node's torchrun starts its own processes"
[[ $rank =~ ^[0-9]+$ ]] && ((rank < nnodes)) || die "node rank '$rank' is not one of 0..$((nnodes - 1))"

host=${COSMOS_RDZV_HOST:-}
if [[ -z $host ]]; then
    nodelist=${SLURM_JOB_NODELIST:?node.sh: SLURM_JOB_NODELIST is not set (or give node 0 as COSMOS_RDZV_HOST)}
    # no `| head -n 1`: head leaves after the first line, scontrol can die writing the next (SIGPIPE), and pipefail
    # then stops node.sh there without a word (it did here, with a stand-in scontrol)
    hosts=$(scontrol show hostnames "$nodelist") || die "\`scontrol show hostnames $nodelist\` failed"
    host=${hosts%%$'\n'*}
    [[ -n $host ]] || die "\`scontrol show hostnames $nodelist\` gave no host"
fi

export COSMOS_TRAIN__LAUNCH__NNODES=$nnodes
export COSMOS_TRAIN__LAUNCH__NODE_RANK=$rank
export COSMOS_TRAIN__LAUNCH__RDZV_ENDPOINT=$host:${COSMOS_RDZV_PORT:-29500}
# Named after the job id (a bare id works too: the config reads 4242 as the name "4242"); the prefix says where the
# run folder came from. A requeued job keeps its id, so its nodes find their run folder <output_dir>/<rdzv_id> and
# resume there.
export COSMOS_TRAIN__LAUNCH__RDZV_ID=slurm-$job_id
export COSMOS_TRAIN__LAUNCH__SOCKET_IFNAME=$COSMOS_SOCKET_IFNAME
export COSMOS_TRAIN__TRAIN__OUTPUT_DIR=$COSMOS_RUNS_DIR
unset COSMOS_SOCKET_IFNAME COSMOS_RUNS_DIR COSMOS_RDZV_PORT COSMOS_RDZV_HOST
exec "$@"
