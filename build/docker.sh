#!/usr/bin/env bash
# A private Docker engine for running the images (test/e2e/install; `make images` needs none), with all its state
# under .cache/docker/ (git-ignored): its socket, data-root, exec-root, pidfile and log. It pulls nothing and needs
# no network set-up: vfs storage, no bridge and no iptables rules, so containers run with --network host (or none).
# It needs root.
#
#   build/docker.sh start        start the engine unless it answers; prints "started" or "running"
#   build/docker.sh stop         stop the engine if it runs, and wait until it has exited
#   build/docker.sh run CMD...   run CMD with DOCKER_HOST set, starting the engine first and stopping it after if
#                                it was not running before
#   build/docker.sh env          print the DOCKER_HOST line for the shell: eval "$(build/docker.sh env)"
#
# Debian's docker.io (dockerd 20.10, containerd, runc) is installed with apt-get when dockerd is missing.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=build/apt.sh
. "$root/build/apt.sh"
state=${FLEET_DOCKER_STATE:-$root/.cache/docker}
sock=$state/docker.sock
pidfile=$state/dockerd.pid
export DOCKER_HOST=unix://$sock

# client runs the docker.io client, which matches the engine's API, whatever else `docker` in $PATH is.
client() { /usr/bin/docker "$@"; }

install() {
	command -v dockerd >/dev/null && [ -x /usr/bin/docker ] && return 0
	apt_install docker --no-install-recommends docker.io tar
}

answers() { client version >/dev/null 2>&1; }

start() {
	if answers; then
		echo running
		return 0
	fi
	[ "$(id -u)" = 0 ] || { echo "docker: the engine needs root" >&2; return 1; }
	install
	mkdir -p "$state/data" "$state/exec"
	echo '{}' >"$state/daemon.json"
	rm -f "$sock"
	# setsid: the engine outlives this script; fd 9 (run's lock) is closed so that the engine does not hold it.
	setsid dockerd --host "$DOCKER_HOST" --data-root "$state/data" --exec-root "$state/exec" \
		--pidfile "$pidfile" --config-file "$state/daemon.json" \
		--storage-driver vfs --bridge none --iptables=false --ip6tables=false --ip-masq=false \
		</dev/null >"$state/dockerd.log" 2>&1 9>&- &
	local pid=$! i
	for i in $(seq 600); do
		answers && { echo started; return 0; }
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	echo "docker: the engine did not answer on $sock; its log, $state/dockerd.log, ends with:" >&2
	tail -20 "$state/dockerd.log" >&2
	kill "$pid" 2>/dev/null || true
	return 1
}

stop() {
	[ -f "$pidfile" ] || return 0
	local pid i
	pid=$(cat "$pidfile")
	# The pidfile may be stale: only a dockerd with our socket is ours to stop.
	if ! tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "--host $DOCKER_HOST "; then
		rm -f "$pidfile"
		return 0
	fi
	kill "$pid"
	# dockerd stops its containers and its own containerd before it exits; wait for all of them.
	for i in $(seq 600); do
		if ! kill -0 "$pid" 2>/dev/null; then
			# dockerd leaves its host network namespace bind-mounted; a later start would mount it again.
			if mountpoint -q "$state/exec/netns/default"; then umount "$state/exec/netns/default"; fi
			echo stopped
			return 0
		fi
		sleep 0.1
	done
	echo "docker: dockerd $pid did not exit within 60 s" >&2
	return 1
}

case "${1:-}" in
start) start ;;
stop) stop ;;
env) echo "export DOCKER_HOST=$DOCKER_HOST" ;;
run)
	shift
	mkdir -p "$state"
	# One run at a time: a second waits instead of racing to start or stop the same engine.
	exec 9>"$state/lock"
	flock 9
	status=$(start)
	rc=0
	"$@" || rc=$?
	if [ "$status" = started ]; then stop >/dev/null; fi
	exit $rc
	;;
*)
	sed -n '2,13p' "$0" >&2
	exit 2
	;;
esac
