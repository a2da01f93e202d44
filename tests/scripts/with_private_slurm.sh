#!/usr/bin/env bash
# with_private_slurm.sh COMMAND [ARGS...]: runs COMMAND against a Slurm cluster of its own, one
# node (this machine) started in a temporary folder and stopped afterwards, so that tests can
# launch tpx's programs with srun and sbatch exactly as users do on a cluster (issue 10: one
# program, any launch), with Slurm's own variables rather than a table of fake ones.
#
# The cluster is private: its own munge key and socket, its own slurm.conf (COMMAND sees it as
# SLURM_CONF, which every Slurm command reads), free ports on 127.0.0.1, state and logs in the
# folder; a Slurm installation already on the machine is neither used nor disturbed. The node is
# this host under its short name (as `scontrol show hostnames "$SLURM_JOB_NODELIST"` gives it to
# job scripts) with at least 8 CPUs whatever the cores, so that a step of 4 tasks fits on CI's 2,
# and 4 GPUs that are not there: Slurm's GPU plugin wants a character device per GPU, and links to
# /dev/null, /dev/zero, /dev/full and /dev/urandom stand in for /dev/nvidia0-3, so that jobs that
# ask for GPUs get them bound as on a GPU node (CUDA_VISIBLE_DEVICES per task).
# Any user may run it: the daemons run as that user (SlurmUser), and so do the jobs.
# Exits with COMMAND's status; with 77 (CTest's SKIP_RETURN_CODE) when Slurm or munge is not
# installed, saying what to install; with 1 and the daemons' logs when the cluster does not start.
set -euo pipefail

if (($# == 0)); then
  echo "usage: $0 COMMAND [ARGS...]" >&2
  exit 2
fi

PATH=$PATH:/usr/sbin:/sbin  # where the daemons are installed, off a user's PATH on Debian
missing=()
for tool in munged slurmctld slurmd srun sbatch scontrol sinfo python3; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
if ((${#missing[@]})); then
  echo "skipped: no private Slurm cluster: ${missing[*]} not found (Debian and Ubuntu: apt-get" \
       "install slurmctld slurmd slurm-client munge)"
  exit 77
fi

dir=$(mktemp -d "${TMPDIR:-/tmp}/tpx-slurm.XXXXXX")
chmod 711 "$dir"  # munged refuses a socket in a folder others cannot enter
mkdir "$dir/spool" "$dir/state"

# The daemons get SIGTERM together, as their services' stop sends it, and SIGKILL if one is still
# there 5 s on (each takes about 2 s to leave).
stop_cluster() {
  local pids=() pid_file
  for pid_file in "$dir"/{slurmd,slurmctld,munged}.pid; do
    [[ -f $pid_file ]] && pids+=("$(<"$pid_file")")
  done
  if ((${#pids[@]})); then
    kill -TERM "${pids[@]}" 2>/dev/null || true
    local alive pid
    for _ in $(seq 50); do
      alive=0
      for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
      ((alive)) || break
      sleep 0.1
    done
    kill -KILL "${pids[@]}" 2>/dev/null || true
  fi
  rm -rf "$dir"
}
trap stop_cluster EXIT

show_logs() {
  for log in "$dir"/*.log; do
    echo "--- $log" >&2
    tail -n 20 "$log" >&2
  done
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

head -c 1024 /dev/urandom > "$dir/munge.key"
chmod 400 "$dir/munge.key"
munged --force --socket="$dir/munge.sock" --key-file="$dir/munge.key" \
       --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munged.seed"

# The node is this host by name where the name resolves (job scripts take rank 0's address from
# it), else localhost; the controller must be the host's own name, reached at 127.0.0.1.
host=$(hostname -s)
node=$host
getent hosts "$node" >/dev/null || node=localhost
cpus=$(nproc)
((cpus >= 8)) || cpus=8
user=$(id -un)
cat > "$dir/slurm.conf" <<EOF
ClusterName=tpx-private
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
AuthInfo=socket=$dir/munge.sock
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
GresTypes=gpu
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=1000 Gres=gpu:4 State=UNKNOWN
PartitionName=tpx Nodes=$node Default=YES MaxTime=10 State=UP
EOF
gpu=0
for device in /dev/null /dev/zero /dev/full /dev/urandom; do
  ln -s "$device" "$dir/nvidia$gpu"
  gpu=$((gpu + 1))
done
printf 'AutoDetect=off\nName=gpu File=%s/nvidia[0-3]\n' "$dir" > "$dir/gres.conf"
export SLURM_CONF=$dir/slurm.conf

if ! slurmctld -f "$SLURM_CONF" || ! slurmd -f "$SLURM_CONF" -N "$node"; then
  echo "with_private_slurm: the Slurm daemons did not start" >&2
  show_logs
  exit 1
fi
state=
for _ in $(seq 150); do
  state=$(sinfo -h -n "$node" -o %T 2>/dev/null || true)
  [[ $state == idle ]] && break
  sleep 0.2
done
if [[ $state != idle ]]; then
  echo "with_private_slurm: node $node is '${state:-unknown}' after 30 s, not idle" >&2
  show_logs
  exit 1
fi

status=0
"$@" || status=$?
exit "$status"
