#!/usr/bin/env bash
# compose.sh — Docker's compose v2 CLI plugin for docker-compose.yml, built
# offline from its Go module and cached. Debian 12 packages the engine
# (docker.io 20.10) but only compose v1 (docker-compose 1.29), which cannot
# read the file (`name:`, `cgroup:`); the module's current line is
# github.com/docker/compose/v5 (the `docker compose` plugin, engine API
# 1.41 and later supported).
#
# Usage: scripts/compose.sh build|install DIR|version
#
#   build        build (or reuse the cached) plugin; prints COMPOSE=<path>
#                on stdout (everything else goes to stderr).
#   install DIR  build if needed, then copy it to DIR/docker-compose
#                (setup.sh: /usr/libexec/docker/cli-plugins, where Debian's
#                docker CLI looks for plugins).
#   version      print the version that is built.
#
# The binary is cached in ${NODELET_CACHE:-$HOME/.cache/nodelet}/compose-<version>/,
# built once (a cold build takes a few minutes on two cores) under a lock.
# It is built inside a copy of the module itself, with its own go.mod and
# go.sum (its exclude directives rule out `go install pkg@version` and apply
# only to the main module), with the version stamped as upstream's Makefile
# does.
set -euo pipefail

VERSION=v5.6.0
MODULE=github.com/docker/compose/v5
CACHE_ROOT=${NODELET_CACHE:-${HOME:-/root}/.cache/nodelet}
BIN_DIR=$CACHE_ROOT/compose-$VERSION
BIN=$BIN_DIR/docker-compose

log() { echo "compose: $*" >&2; }
die() { log "error: $*"; exit 1; }

find_go() {
	if command -v go >/dev/null 2>&1; then
		command -v go
	elif [[ -x /usr/local/go/bin/go ]]; then
		echo /usr/local/go/bin/go
	else
		die "go not found in PATH (needed to build docker compose)"
	fi
}

have_bin() { [[ -x $BIN ]] && [[ $("$BIN" version --short 2>/dev/null) == "${VERSION#v}" ]]; }

build() {
	have_bin && return 0
	mkdir -p "$BIN_DIR"
	exec 9>"$BIN_DIR/.build.lock"
	flock 9
	if have_bin; then
		flock -u 9
		exec 9>&-
		return 0
	fi
	local gobin src tmp start rc=0
	gobin=$(find_go)
	start=$SECONDS
	log "building docker compose $VERSION into $BIN_DIR (a cold build takes a few minutes)..."
	src=$(GOWORK=off GOFLAGS=-mod=mod "$gobin" mod download -json "$MODULE@$VERSION" | awk -F'"' '$2 == "Dir" { print $4 }')
	[[ -d $src ]] || die "go mod download $MODULE@$VERSION gave no directory"
	tmp=$(mktemp -d "$BIN_DIR/.build.XXXXXX")
	cp -r "$src/." "$tmp/src"
	chmod -R u+w "$tmp/src"
	(
		cd "$tmp/src"
		export GOWORK=off CGO_ENABLED=0
		"$gobin" build -mod=readonly -trimpath \
			-ldflags "-s -w -X $MODULE/internal.Version=$VERSION" -o "$tmp/docker-compose" ./cmd
	) >&2 || rc=$?
	if [[ $rc -ne 0 ]]; then
		rm -rf "$tmp"
		flock -u 9
		die "building docker compose $VERSION failed"
	fi
	mv -f "$tmp/docker-compose" "$BIN"
	rm -rf "$tmp"
	log "built docker compose $VERSION in $((SECONDS - start))s"
	flock -u 9
	exec 9>&-
}

case ${1:-} in
build)
	build
	echo "COMPOSE=$BIN"
	;;
install)
	dir=${2:-}
	[[ -n $dir ]] || die "install needs a directory"
	build
	mkdir -p "$dir"
	# Not over a running program: a new file, renamed into place.
	install -m 0755 "$BIN" "$dir/.docker-compose.new"
	mv -f "$dir/.docker-compose.new" "$dir/docker-compose"
	echo "COMPOSE=$dir/docker-compose"
	;;
version) echo "$VERSION" ;;
*)
	sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
	exit 2
	;;
esac
