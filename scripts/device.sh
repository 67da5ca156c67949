#!/usr/bin/env bash
# The one entry point for work on the GPU machine: scripts/device.sh TASK[:ARG,...]...
# It does the prologue once (repository root, $OUT made and absolute, scripts/device/env.sh: the
# carried .debs unpacked, HEADROOM_REQUIRE_GPU=1, device_configure / device_build), then runs each
# TASK's body, scripts/device/TASK.sh, in its own subshell and in the order given, so a failing
# task (device_build exits on a build error) ends only itself. ARGs after a colon are the task's
# positional arguments (commas between them): perf:quick, compare:prepare. A task whose only
# argument is `prepare` is a host-side step (run here, before the device call) and gets no
# device prologue. The exit status is the first failing task's, or 0. Settings stay environment
# variables, as each task's header lists them (SERIAL=2 TESTS=0 scripts/device.sh compare).
# Logs go to $OUT (default ./device-logs).
#   scripts/device.sh list        the tasks with the first line of each one's header
set -uo pipefail
cd "$(dirname "$0")/.."
tasks_dir=scripts/device

task_list() {
  for f in "$tasks_dir"/*.sh; do
    local name
    name=$(basename "$f" .sh)
    [ "$name" = env ] && continue
    printf '  %-13s %s\n' "$name" "$(sed -n '1s/^# *//p' "$f")"
  done
}

if [ $# -eq 0 ] || [ "$1" = list ] || [ "$1" = -h ] || [ "$1" = --help ]; then
  echo "usage: scripts/device.sh TASK[:ARG,...]...   tasks:"
  task_list
  [ $# -eq 0 ] && exit 2
  exit 0
fi
for spec in "$@"; do  # every task must exist before any runs
  [ -f "$tasks_dir/${spec%%:*}.sh" ] && [ "${spec%%:*}" != env ] ||
    { echo "scripts/device.sh: no task '${spec%%:*}'; tasks:"; task_list; exit 2; }
done

prologue_done=0
device_prologue() {
  [ "$prologue_done" = 1 ] && return
  OUT=${OUT:-device-logs}
  mkdir -p "$OUT"
  OUT=$(cd "$OUT" && pwd)
  export OUT
  source "$tasks_dir/env.sh"
  prologue_done=1
}

status=0
for spec in "$@"; do
  task=${spec%%:*}
  args=()
  [ "$spec" != "$task" ] && IFS=, read -r -a args <<< "${spec#*:}"
  [ "${args[*]:-}" = prepare ] || device_prologue
  [ $# -gt 1 ] && echo "=== scripts/device.sh $spec"
  ( set -- ${args[@]+"${args[@]}"}; source "$tasks_dir/$task.sh" "$@" )  # only its own arguments
  rc=$?
  [ $# -gt 1 ] && echo "=== $spec exit $rc"
  [ "$status" = 0 ] && status=$rc
done
exit "$status"
