# A private dockerd for the bench scripts (sourced): its own data root,
# exec root, socket, pidfile and client config under DIR; no bridge, no
# iptables. Never the host's docker service: it is started here and
# stopped here, by pid.
#
#   dockerd_start DIR [DOCKERD FLAGS...]  sets DOCKERD_PID and DOCKER
#                                         (the client command), waits until
#                                         it answers; 1 (log tail on
#                                         stderr) if it does not.
#   dockerd_stop                          for the EXIT trap: removes its
#                                         containers, stops it, unmounts
#                                         what it left under DIR.
DOCKERD_PID=""
DOCKER=""
DOCKERD_DIR=""

dockerd_start() {
    local dir=$1
    shift
    DOCKERD_DIR=$dir
    mkdir -p "$dir/data" "$dir/exec"
    dockerd --data-root "$dir/data" --exec-root "$dir/exec" --pidfile "$dir/dockerd.pid" \
        -H "unix://$dir/docker.sock" --iptables=false --ip6tables=false --bridge=none --ip-masq=false \
        "$@" >"$dir/dockerd.log" 2>&1 &
    DOCKERD_PID=$!
    DOCKER="/usr/bin/docker -H unix://$dir/docker.sock"
    export DOCKER_CONFIG=$dir/client
    for _ in $(seq 240); do
        $DOCKER info >/dev/null 2>&1 && return 0
        kill -0 "$DOCKERD_PID" 2>/dev/null || break
        sleep 0.5
    done
    tail -20 "$dir/dockerd.log" >&2
    return 1
}

dockerd_stop() {
    [ -n "$DOCKERD_PID" ] || return 0
    $DOCKER ps -aq 2>/dev/null | xargs -r $DOCKER rm -f >/dev/null 2>&1
    kill -TERM "$DOCKERD_PID" 2>/dev/null
    for _ in $(seq 100); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$DOCKERD_PID" 2>/dev/null && kill -KILL "$DOCKERD_PID"
    wait "$DOCKERD_PID" 2>/dev/null
    local m
    for m in $(awk -v w="$DOCKERD_DIR/" 'index($5, w) == 1 {print $5}' /proc/self/mountinfo | sort -r); do
        umount -l "$m" 2>/dev/null
    done
    DOCKERD_PID=""
}
