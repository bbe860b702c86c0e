#!/bin/bash
# Envoy exits at once on SIGTERM, cutting every stream in flight. This wrapper
# (the envoy container's entrypoint in docker-compose.yml) turns a stop into a
# drain: it asks Envoy's admin to drain its listeners gracefully (new requests
# get `Connection: close` / HTTP/2 GOAWAY), waits until no downstream request
# is active or DRAIN_SECONDS have passed, and only then stops Envoy. Give the
# container a stop_grace_period longer than DRAIN_SECONDS.
#   ENVOY_ADMIN_PORT (9901)   STAT_PREFIX (gateway)   DRAIN_SECONDS (125)   ENVOY_BIN (envoy)
set -u
admin_port=${ENVOY_ADMIN_PORT:-9901}
stat="http.${STAT_PREFIX:-gateway}.downstream_rq_active"
drain_seconds=${DRAIN_SECONDS:-125}

"${ENVOY_BIN:-envoy}" "$@" &
pid=$!

# One HTTP/1.1 request (Connection: close) to the admin listener, over bash's /dev/tcp (no curl needed).
admin() {
  exec 3<>"/dev/tcp/127.0.0.1/${admin_port}" || return 1
  printf '%s %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: 0\r\n\r\n' "$1" "$2" >&3
  cat <&3
  exec 3<&-
}

drain() {
  trap '' TERM INT
  echo "drain-on-stop: draining listeners (up to ${drain_seconds} s)" >&2
  admin POST '/drain_listeners?graceful' >/dev/null 2>&1
  local end=$((SECONDS + drain_seconds)) active
  while [ "$SECONDS" -lt "$end" ]; do
    active=$(admin GET '/stats?filter=downstream_rq_active' 2>/dev/null | tr -d '\r' | sed -n "s/^${stat}: //p")
    [ "${active:-0}" = "0" ] && break
    sleep 1
  done
  echo "drain-on-stop: ${active:-0} requests still active; stopping Envoy" >&2
  kill -TERM "$pid" 2>/dev/null
}

trap drain TERM INT
wait "$pid"          # interrupted by the trap
wait "$pid"          # Envoy's own exit
