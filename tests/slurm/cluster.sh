#!/usr/bin/env bash
# A one-node Slurm cluster on 127.0.0.1 for the tests: munged as user munge, slurmctld and slurmd as
# root, every port, state and spool folder under DIR, nothing of the system's own configuration used.
#
#   tests/slurm/cluster.sh start DIR   start the daemons; prints `export SLURM_CONF=DIR/slurm.conf`
#   tests/slurm/cluster.sh stop DIR    stop every daemon this script started in DIR
#
# Needs root and Debian's slurm-wlm and munge (`make slurm-packages`). Exit 77 when they are absent.
set -euo pipefail

cmd=${1:-}
dir=${2:-}
if [ -z "$cmd" ] || [ -z "$dir" ]; then
  echo "usage: $0 start|stop DIR" >&2
  exit 2
fi

stop() {
  for pidfile in "$dir"/slurmd.pid "$dir"/slurmctld.pid "$dir"/munge/munged.pid; do
    if [ -f "$pidfile" ]; then
      pid=$(cat "$pidfile")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
      rm -f "$pidfile"
    fi
  done
}

if [ "$cmd" = stop ]; then
  stop
  exit 0
fi
[ "$cmd" = start ] || { echo "unknown command $cmd (start|stop)" >&2; exit 2; }

for b in munged slurmctld slurmd sbatch; do
  command -v "$b" >/dev/null 2>&1 || [ -x "/usr/sbin/$b" ] || { echo "skip: $b not installed (make slurm-packages)" >&2; exit 77; }
done
[ "$(id -u)" = 0 ] || { echo "skip: the daemons need root" >&2; exit 77; }
export PATH="/usr/sbin:$PATH"

mkdir -p "$dir"/munge "$dir"/state "$dir"/spool "$dir"/log
dir=$(cd "$dir" && pwd)
chown munge: "$dir"/munge
chmod 700 "$dir"/munge
# A key of this cluster's own (the system's /etc/munge/munge.key is left alone).
dd if=/dev/urandom of="$dir"/munge/munge.key bs=1 count=1024 status=none
chown munge: "$dir"/munge/munge.key
chmod 400 "$dir"/munge/munge.key
socket="$dir"/munge/munge.socket
runuser -u munge -- munged --key-file="$dir"/munge/munge.key --socket="$socket" \
  --pid-file="$dir"/munge/munged.pid --log-file="$dir"/munge/munged.log --seed-file="$dir"/munge/munged.seed --force

# Free ports: the controller's and the node daemon's.
port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
ctl=$(port)
node=$(port)
cpus=$(nproc)
mem=$(( $(awk '/MemTotal/ { print $2 }' /proc/meminfo) / 1024 - 1024 ))
host=$(hostname -s)
cat > "$dir"/slurm.conf <<EOF
ClusterName=tgrag-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctl
SlurmdPort=$node
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MinJobAge=300
KillWait=5
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF="$dir"/slurm.conf
slurmctld -i
slurmd
# Up when the node takes jobs.
for _ in $(seq 100); do
  if sinfo -h -o '%t' 2>/dev/null | grep -qE '^(idle|mix|alloc)'; then
    echo "export SLURM_CONF=$dir/slurm.conf"
    exit 0
  fi
  sleep 0.2
done
echo "the one-node cluster did not come up; logs in $dir/log" >&2
sinfo >&2 || true
tail -5 "$dir"/log/*.log >&2 || true
stop
exit 1
