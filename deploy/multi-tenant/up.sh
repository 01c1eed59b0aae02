#!/bin/sh
# up.sh DIR: start the multi-tenant agentlog deployment in the background, state under DIR.
#
# Builds nats-server (from this module's own nats-server dependency), agentlog and the config
# generator into DIR/bin, writes the configuration (gen: a test CA, tenants A and B as NATS accounts,
# five roles each), starts nats-server on free loopback ports, provisions each tenant as its
# operator, starts a projector and a forker per tenant, each as its own role, and waits until every
# service is ready. Then it writes DIR/env, DIR/down.sh and one agentlog context per tenant role
# (mt-<tenant>-<role>, unless AGENTLOG_MT_CONTEXTS=0) and exits 0. On a failure it stops what it
# started, prints the reason and the log to look at, and exits 1.
#
#   . DIR/env; agentlog $A_AGENT_ARGS import FILE --session s1; DIR/down.sh
set -eu

if [ $# -ne 1 ]; then
	echo "usage: $0 DIR" >&2
	exit 2
fi
mkdir -p "$1"
DIR=$(cd "$1" && pwd)
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN="$DIR/bin"
LOGS="$DIR/logs"
PIDS="$DIR/pids"
TENANTS_ARG=${AGENTLOG_MT_TENANTS:-A,B} # tenant account names, comma separated
READY_TIMEOUT=${AGENTLOG_MT_READY_TIMEOUT:-60}

if [ -d "$PIDS" ] && [ -n "$(ls "$PIDS" 2>/dev/null)" ]; then
	echo "up.sh: $DIR holds a running deployment (pids in $PIDS); run $DIR/down.sh first" >&2
	exit 1
fi
mkdir -p "$BIN" "$LOGS" "$PIDS"

fail() {
	echo "up.sh: $*" >&2
	[ -x "$DIR/down.sh" ] && "$DIR/down.sh" >/dev/null 2>&1 || true
	exit 1
}

# down.sh first, so that a failure below stops what was started.
cat > "$DIR/down.sh" <<DOWN
#!/bin/sh
# Stops the deployment under $DIR: the services, then nats-server (SIGTERM, SIGKILL after 10 s).
# A pid is only signalled while its command line still names this directory.
PIDS='$PIDS'
DIR='$DIR'
stop() {
	f="\$PIDS/\$1"
	[ -f "\$f" ] || return 0
	pid=\$(cat "\$f")
	if [ -r "/proc/\$pid/cmdline" ] && tr '\0' ' ' < "/proc/\$pid/cmdline" | grep -qF "\$DIR"; then
		kill -TERM "\$pid" 2>/dev/null
		i=0
		while kill -0 "\$pid" 2>/dev/null && [ \$i -lt 100 ]; do sleep 0.1; i=\$((i+1)); done
		kill -KILL "\$pid" 2>/dev/null
	fi
	rm -f "\$f"
}
for f in "\$PIDS"/*; do
	[ -e "\$f" ] || continue
	n=\$(basename "\$f")
	[ "\$n" = nats-server ] || stop "\$n"
done
stop nats-server
echo "down.sh: stopped the deployment in \$DIR (state kept; remove \$DIR to discard it)"
DOWN
chmod +x "$DIR/down.sh"

(cd "$ROOT" &&
	go build -o "$BIN/nats-server" github.com/nats-io/nats-server/v2 &&
	go build -o "$BIN/agentlog" ./cmd/agentlog &&
	go build -o "$BIN/gen" ./deploy/multi-tenant/gen) || fail "build failed"

if [ ! -f "$DIR/nats.conf" ]; then
	"$BIN/gen" -dir "$DIR" -tenants "$TENANTS_ARG" || fail "generating the configuration failed"
else
	[ ! -f "$DIR/env" ] || mv "$DIR/env" "$DIR/env.next" # written again once ready
	echo "up.sh: reusing the configuration in $DIR (remove $DIR/nats.conf to generate a new one; the ports may now be taken)"
fi
. "$DIR/gen.sh"

# start NAME CMD...: run CMD in the background, its output in LOGS/NAME.log, its pid in PIDS/NAME.
start() {
	name=$1
	shift
	"$@" </dev/null >"$LOGS/$name.log" 2>&1 &
	echo $! >"$PIDS/$name"
}

# AGENTLOG_MT_SERVER_FLAGS: extra nats-server flags, e.g. -V to trace every message (for auditing
# which subjects each role uses), unquoted.
# shellcheck disable=SC2086
start nats-server "$BIN/nats-server" -c "$DIR/nats.conf" ${AGENTLOG_MT_SERVER_FLAGS:-}
i=0
until curl -fsS "$HTTP_URL/healthz?js-enabled-only=true" >/dev/null 2>&1; do
	i=$((i + 1))
	[ $i -le $((READY_TIMEOUT * 10)) ] || fail "nats-server not healthy within ${READY_TIMEOUT}s (see $LOGS/nats-server.log)"
	kill -0 "$(cat "$PIDS/nats-server")" 2>/dev/null || fail "nats-server exited (see $LOGS/nats-server.log)"
	sleep 0.1
done

for t in $TENANTS; do
	(. "$DIR/tenants/$t/operator.env" && "$BIN/agentlog" provision) >"$LOGS/$t-provision.log" 2>&1 ||
		fail "provisioning tenant $t as its operator failed (see $LOGS/$t-provision.log)"
	(. "$DIR/tenants/$t/projector.env" && exec "$BIN/agentlog" projector --name "$t-projector-1" --metrics-addr 127.0.0.1:0) \
		</dev/null >"$LOGS/$t-projector.log" 2>&1 &
	echo $! >"$PIDS/$t-projector"
	(. "$DIR/tenants/$t/forker.env" && exec "$BIN/agentlog" forker --metrics-addr 127.0.0.1:0) \
		</dev/null >"$LOGS/$t-forker.log" 2>&1 &
	echo $! >"$PIDS/$t-forker"
done

# Each service prints its metrics address; ready when its /readyz answers 200.
for t in $TENANTS; do
	for s in projector forker; do
		log="$LOGS/$t-$s.log"
		i=0
		while :; do
			addr=$(sed -n 's|.*metrics: http://\([^/]*\)/metrics.*|\1|p' "$log" | head -n 1)
			if [ -n "$addr" ] && curl -fsS "http://$addr/readyz" >/dev/null 2>&1; then
				break
			fi
			i=$((i + 1))
			[ $i -le $((READY_TIMEOUT * 10)) ] || fail "$t $s not ready within ${READY_TIMEOUT}s (see $log)"
			kill -0 "$(cat "$PIDS/$t-$s")" 2>/dev/null || fail "$t $s exited (see $log)"
			sleep 0.1
		done
	done
done

# One agentlog context per tenant role (agentlog context ls; --context mt-a-agent), in the user's
# configuration directory (XDG_CONFIG_HOME/agentlog, else ~/.config/agentlog); AGENTLOG_MT_CONTEXTS=0
# writes none. A context of the same name (an earlier deployment's) is replaced.
CONTEXTS=""
if [ "${AGENTLOG_MT_CONTEXTS:-1}" != 0 ]; then
	for t in $TENANTS; do
		for r in agent projector forker operator viewer; do
			(. "$DIR/tenants/$t/$r.env" && "$BIN/agentlog" context save "mt-$t-$r" --description "$DIR: tenant $t, role $r") \
				>>"$LOGS/contexts.log" 2>&1 || fail "saving the agentlog context mt-$t-$r failed (see $LOGS/contexts.log)"
			CONTEXTS="$CONTEXTS mt-$t-$r"
		done
	done
fi

mv "$DIR/env.next" "$DIR/env"
echo "up.sh: ready. . $DIR/env, then e.g. $BIN/agentlog \$A_AGENT_ARGS sessions; stop with $DIR/down.sh"
[ -z "$CONTEXTS" ] || echo "up.sh: agentlog contexts, one per tenant role:$CONTEXTS (e.g. $BIN/agentlog --context mt-a-agent sessions)"
