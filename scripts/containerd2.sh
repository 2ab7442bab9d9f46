#!/usr/bin/env bash
# containerd2.sh — containerd 2.x for nodelet, built offline from its Go
# module (github.com/containerd/containerd/v2, the version that
# scripts/containerd2/go.mod requires) and cached; Debian's containerd 1.6
# stays the default runtime, this one is what `scripts/setup.sh
# --containerd=2` and NODELET_TEST_CONTAINERD=2 run.
#
# Usage: scripts/containerd2.sh build|install DIR|version
#
#   build        build (or reuse the cached) containerd, containerd-shim-runc-v2
#                and ctr; prints CONTAINERD=, CONTAINERD_SHIM=, CTR= lines on
#                stdout (everything else goes to stderr).
#   install DIR  build if needed, then copy the three into DIR (setup.sh:
#                /usr/local/libexec/nodelet/containerd2).
#   version      print the version that is built (e.g. v2.4.2).
#
# Binaries are cached in ${NODELET_CACHE:-$HOME/.cache/nodelet}/containerd-<version>/,
# built once (a cold build takes about two minutes on two cores), under a
# lock against concurrent builds. As upstream's Makefile builds them:
# containerd and ctr with cgo, the shim static (CGO_ENABLED=0, tag no_grpc),
# all with urfave_cli_no_docs, and the version stamped with -X. Tags
# no_btrfs no_devmapper no_zfs leave out the snapshotters nodelet never uses
# (btrfs needs libbtrfs headers this machine lacks; nodelet's config
# disables all three anyway). runc is Debian's (/usr/sbin/runc), found by
# the shim through PATH.
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MODULE_DIR=$REPO_ROOT/scripts/containerd2
CACHE_ROOT=${NODELET_CACHE:-${HOME:-/root}/.cache/nodelet}
PKG=github.com/containerd/containerd/v2
TAGS="urfave_cli_no_docs no_btrfs no_devmapper no_zfs"
BINS=(containerd containerd-shim-runc-v2 ctr)

log() { echo "containerd2: $*" >&2; }
die() { log "error: $*"; exit 1; }

# version prints the containerd version scripts/containerd2/go.mod requires.
version() {
	awk -v m="$PKG" '$1 == m { print $2 } $1 == "require" && $2 == m { print $3 }' "$MODULE_DIR/go.mod"
}

VERSION=$(version)
[[ -n $VERSION ]] || die "no $PKG in $MODULE_DIR/go.mod"
BIN_DIR=$CACHE_ROOT/containerd-$VERSION

find_go() {
	if command -v go >/dev/null 2>&1; then
		command -v go
	elif [[ -x /usr/local/go/bin/go ]]; then
		echo /usr/local/go/bin/go
	else
		die "go not found in PATH (needed to build containerd)"
	fi
}

# have_bins: all three are there, and containerd is the version wanted.
have_bins() {
	local n
	for n in "${BINS[@]}"; do [[ -x $BIN_DIR/$n ]] || return 1; done
	[[ $("$BIN_DIR/containerd" --version 2>/dev/null) == *" $VERSION "* ]]
}

ldflags() {
	echo "-X $PKG/version.Version=$VERSION -X $PKG/version.Revision=nodelet-module-build -X $PKG/version.Package=github.com/containerd/containerd"
}

build() {
	have_bins && return 0
	mkdir -p "$BIN_DIR"
	exec 9>"$BIN_DIR/.build.lock"
	flock 9
	if have_bins; then
		flock -u 9
		exec 9>&-
		return 0
	fi
	local gobin tmp start rc=0
	gobin=$(find_go)
	tmp=$(mktemp -d "$BIN_DIR/.build.XXXXXX")
	start=$SECONDS
	log "building containerd $VERSION (containerd, containerd-shim-runc-v2, ctr) into $BIN_DIR (a cold build takes about two minutes)..."
	(
		cd "$MODULE_DIR"
		export GOWORK=off
		"$gobin" build -mod=readonly -trimpath -tags "$TAGS" -ldflags "$(ldflags)" -o "$tmp/" \
			"$PKG/cmd/containerd" "$PKG/cmd/ctr"
		CGO_ENABLED=0 "$gobin" build -mod=readonly -trimpath -tags "$TAGS no_grpc" -ldflags "$(ldflags)" \
			-o "$tmp/" "$PKG/cmd/containerd-shim-runc-v2"
	) >&2 || rc=$?
	if [[ $rc -ne 0 ]]; then
		rm -rf "$tmp"
		flock -u 9
		die "building containerd $VERSION failed"
	fi
	local n
	for n in "${BINS[@]}"; do mv -f "$tmp/$n" "$BIN_DIR/$n"; done
	rm -rf "$tmp"
	log "built containerd $VERSION in $((SECONDS - start))s"
	flock -u 9
	exec 9>&-
}

cmd_build() {
	build
	echo "CONTAINERD=$BIN_DIR/containerd"
	echo "CONTAINERD_SHIM=$BIN_DIR/containerd-shim-runc-v2"
	echo "CTR=$BIN_DIR/ctr"
}

cmd_install() {
	local dir=${1:-}
	[[ -n $dir ]] || die "install needs a directory"
	build
	mkdir -p "$dir"
	local n
	for n in "${BINS[@]}"; do
		# Not over a running program: a new file, renamed into place.
		install -m 0755 "$BIN_DIR/$n" "$dir/.$n.new"
		mv -f "$dir/.$n.new" "$dir/$n"
	done
	echo "CONTAINERD=$dir/containerd"
	echo "CONTAINERD_SHIM=$dir/containerd-shim-runc-v2"
	echo "CTR=$dir/ctr"
}

case ${1:-} in
build) cmd_build ;;
install) shift; cmd_install "$@" ;;
version) echo "$VERSION" ;;
*)
	sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
	exit 2
	;;
esac
