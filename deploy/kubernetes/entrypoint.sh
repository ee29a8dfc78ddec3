#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# PID 1 of the nsbox container: starts nsboxd, waits for its socket, then the
# HTTP front on $NSBOX_HTTP_ADDR (one address or several, space-separated;
# 0.0.0.0:8080). $NSBOX_HTTP_AUTH says how it knows its clients: "tokens"
# (the default: the bearer tokens in $NSBOX_TOKENS_FILE, no front without
# that file) or "network-policy" (no tokens: every client that reaches the
# pod, which only the cluster's network policy bounds; for the clients that
# send no Authorization and the routers that strip it). SIGTERM goes to
# both; nsboxd removes its sandboxes and exits, and the container exits with
# nsboxd's status. Where the image has no HTTP front (nsbox-http not built),
# only nsboxd runs.
#
#   nsbox-entrypoint [NSBOXD-ARGS...]   run (the container's command)
#   nsbox-entrypoint probe              readiness: nsboxd answers server.info and
#                                       the front (its first address) answers
#                                       GET /healthz, which needs no token
#
# NSBOX_IMAGE_COPY_TO=DIR copies the images to DIR first (skipped when DIR
# already has the same manifest) and serves them from there: on a real
# filesystem idmapped mounts work, so each sandbox gets its own uid range.
set -u
: "${NSBOX_HTTP_ADDR:=0.0.0.0:8080}"
: "${NSBOX_TOKENS_FILE:=/etc/nsbox/tokens}"
: "${NSBOX_HTTP_AUTH:=tokens}"

# Whether the HTTP front runs: built, and its mode has what it needs.
front_wanted() {
        [ -x /usr/local/bin/nsbox-http ] || return 1
        case $NSBOX_HTTP_AUTH in
        tokens) [ -f "$NSBOX_TOKENS_FILE" ] ;;
        network-policy) return 0 ;;
        *) return 1 ;;
        esac
}

probe() {
        nsbox status >/dev/null 2>&1 || { echo "nsboxd does not answer" >&2; exit 1; }
        front_wanted || exit 0
        local first=${NSBOX_HTTP_ADDR%% *}
        local port=${first##*:} proto code
        exec 3<>"/dev/tcp/127.0.0.1/$port" || exit 1
        printf 'GET /healthz HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3
        read -r -t 5 proto code _ <&3 || { echo "no answer on port $port" >&2; exit 1; }
        case $code in
        200) exit 0 ;;
        *) echo "GET /healthz: $proto $code" >&2; exit 1 ;;
        esac
}
case $NSBOX_HTTP_AUTH in
tokens | network-policy) ;;
*)
        echo "nsbox-entrypoint: NSBOX_HTTP_AUTH=$NSBOX_HTTP_AUTH: want tokens or network-policy" >&2
        exit 2
        ;;
esac
[ "${1:-}" = probe ] && probe

if [ -n "${NSBOX_IMAGE_COPY_TO:-}" ]; then
        mkdir -p "$NSBOX_IMAGE_COPY_TO" || exit 1
        for img in "$NSBOX_IMAGE_DIR"/*/; do
                img=${img%/}
                dst=$NSBOX_IMAGE_COPY_TO/${img##*/}
                if [ ! -f "$dst/manifest.json" ] || [ "$(<"$img/manifest.json")" != "$(<"$dst/manifest.json")" ]; then
                        echo "nsbox-entrypoint: copying image ${img##*/} to $dst" >&2
                        rm -rf "$dst.tmp" "$dst" && cp -a "$img" "$dst.tmp" && mv "$dst.tmp" "$dst" || exit 1
                fi
        done
        export NSBOX_IMAGE_DIR=$NSBOX_IMAGE_COPY_TO
fi
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

listen=()
for addr in $NSBOX_HTTP_ADDR; do
        listen+=(--http "$addr")
done
if front_wanted && [ "$NSBOX_HTTP_AUTH" = network-policy ]; then
        nsbox serve "${listen[@]}" --insecure-no-auth-behind-network-policy &
        front=$!
elif front_wanted; then
        nsbox serve "${listen[@]}" --tokens "$NSBOX_TOKENS_FILE" &
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
