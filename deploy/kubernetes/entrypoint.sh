#!/bin/bash
# PID 1 of the nsbox container: starts nsboxd, waits for its socket, then the
# HTTP front on $NSBOX_HTTP_ADDR (0.0.0.0:8080) with the bearer tokens in
# $NSBOX_TOKENS_FILE. SIGTERM goes to both; nsboxd removes its sandboxes and
# exits, and the container exits with nsboxd's status. Where the binary has no
# HTTP front (nsbox-http not built), only nsboxd runs.
set -u
: "${NSBOX_HTTP_ADDR:=0.0.0.0:8080}"
: "${NSBOX_TOKENS_FILE:=/etc/nsbox/tokens}"
mkdir -p "${NSBOX_SOCKET%/*}" "$NSBOX_STATE_DIR"

nsboxd "$@" &
daemon=$!
front=""
stop() {
        [ -n "$front" ] && kill -TERM "$front" 2>/dev/null
        kill -TERM "$daemon" 2>/dev/null
}
trap stop TERM INT

i=0
until nsbox status >/dev/null 2>&1; do
        if ! kill -0 "$daemon" 2>/dev/null; then
                wait "$daemon"
                exit $?
        fi
        i=$((i + 1))
        [ "$i" -gt 600 ] && { echo "nsbox-entrypoint: nsboxd did not start serving in 60 s" >&2; exit 1; }
        sleep 0.1
done

if [ -x /usr/local/bin/nsbox-http ] && [ -f "$NSBOX_TOKENS_FILE" ]; then
        nsbox serve --http "$NSBOX_HTTP_ADDR" --tokens "$NSBOX_TOKENS_FILE" &
        front=$!
elif [ -x /usr/local/bin/nsbox-http ]; then
        echo "nsbox-entrypoint: no tokens file $NSBOX_TOKENS_FILE: HTTP front not started" >&2
fi

# Whichever ends first ends the container: a front without its daemon (or a
# daemon without its front) is not a ready pod. wait -n returns when a child
# ends or a trapped signal arrives.
while kill -0 "$daemon" 2>/dev/null && { [ -z "$front" ] || kill -0 "$front" 2>/dev/null; }; do
        wait -n
done
stop
wait "$daemon"
rc=$?
[ -n "$front" ] && wait "$front" 2>/dev/null
exit $rc
