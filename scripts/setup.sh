#!/usr/bin/env bash
# setup.sh — make this machine (Debian 12, root) ready to build, test and run
# nodelet. Idempotent: a second run changes nothing and takes a few seconds.
#
# Usage: scripts/setup.sh [--containerd=1|2]   (as root, from anywhere in the tree)
#
#   --containerd=2  containerd 2.x (the default; docs/runtimes.md): built from
#                   its Go module and cached by scripts/containerd2.sh,
#                   installed in /usr/local/libexec/nodelet/containerd2
#                   (containerd, containerd-shim-runc-v2, ctr); step 3 writes
#                   its version-3 config with root /var/lib/nodelet/containerd2;
#                   step 6 imports into it. A 1.x that answers on the socket
#                   is refused before step 3. Debian's runc serves both.
#   --containerd=1  Debian's containerd 1.6 instead (/usr/bin/containerd,
#                   config version 2, root /var/lib/nodelet/containerd; the
#                   two roots are kept apart, so switching back and forth is
#                   one run with the other flag). Set runtime.containerdVersion
#                   to 1 in the node's config to match.
#
# Steps, one line of output each:
#   1. apt-get install what is missing of: containerd runc
#      containernetworking-plugins busybox-static bash-static iproute2 iptables
#      etcd-server openssl util-linux procps dbus-daemon systemd
#      systemd-container debootstrap (apt-get update only when something
#      must be installed; dbus-daemon: the graceful node shutdown tests run a
#      private D-Bus; systemd for systemd-analyze and systemd-sysusers,
#      systemd-container and debootstrap for the test that boots the units
#      under systemd);
#   2. go build -o bin/ ./cmd/... (every nodelet binary, nodelet-pause
#      included) and bin/setuptool (this script's helper, scripts/setuptool);
#      then the users the daemons run as (deploy/systemd/sysusers.d/nodelet.conf
#      installed in /etc/sysusers.d, systemd-sysusers: group nodelet and
#      nodelet-bus, nodelet-sources, nodelet-admission);
#   3. the node's containerd config: /etc/nodelet/containerd/config.toml
#      (root /var/lib/nodelet/containerd2, state /run/nodelet/containerd,
#      socket /run/nodelet/containerd/containerd.sock, CNI conf dir
#      /etc/nodelet/cni/net.d, CNI bin dir /usr/lib/cni, sandbox image
#      nodelet.local/pause:3.10);
#   4. the node's CNI conflist: /etc/nodelet/cni/net.d/10-nodelet.conflist
#      (bridge nodelet0, subnet 10.88.0.0/16), validated against the plugins;
#   5. the local images nodelet.local/pause:3.10 and nodelet.local/busybox:1.35,
#      built into ${NODELET_CACHE:-$HOME/.cache/nodelet}/images;
#   6. both images imported into the node's containerd (namespace k8s.io).
#      If that containerd is running, into it. If not, this script starts it
#      with the config of step 3 just for the import and stops it again, so
#      the node is complete whoever starts containerd later (`nodelet up` with
#      runtime.manageContainerd, or an init system). Images already imported
#      with the same ID are skipped.
#
# Environment: NODELET_SUBNET (default 10.88.0.0/16), NODELET_CACHE,
# NODELET_BUILD (packages to build, default ./cmd/...).
set -euo pipefail
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO_ROOT"

ETC=/etc/nodelet
CONTAINERD_CONFIG=$ETC/containerd/config.toml
CONTAINERD_ROOT=/var/lib/nodelet/containerd
CONTAINERD_STATE=/run/nodelet/containerd
CONTAINERD_SOCKET=$CONTAINERD_STATE/containerd.sock
CNI_CONF_DIR=$ETC/cni/net.d
CNI_BIN_DIR=/usr/lib/cni
SUBNET=${NODELET_SUBNET:-10.88.0.0/16}
BRIDGE=nodelet0
PACKAGES=(containerd runc containernetworking-plugins busybox-static bash-static iproute2 iptables
  etcd-server openssl util-linux procps dbus-daemon systemd systemd-container debootstrap)

step() { echo "setup: $*"; }
die() { echo "setup: error: $*" >&2; exit 1; }

CONTAINERD_MAJOR=2
for arg in "$@"; do
  case $arg in
  --containerd=1 | --containerd=1.6) CONTAINERD_MAJOR=1 ;;
  --containerd=2) CONTAINERD_MAJOR=2 ;;
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) die "unknown argument $arg (usage: scripts/setup.sh [--containerd=1|2])" ;;
  esac
done
CONTAINERD=containerd
CTR=ctr
CONFIG_MAJOR=()
if [ "$CONTAINERD_MAJOR" = 2 ]; then
  CONTAINERD2_DIR=/usr/local/libexec/nodelet/containerd2
  CONTAINERD_ROOT=/var/lib/nodelet/containerd2
  CONTAINERD=$CONTAINERD2_DIR/containerd
  CTR=$CONTAINERD2_DIR/ctr
  CONFIG_MAJOR=(--major 2 --binary "$CONTAINERD")
fi

[ "$(id -u)" -eq 0 ] || die "run as root (it installs packages and writes /etc/nodelet)"
command -v go >/dev/null || die "go not found (expected /usr/local/go/bin/go)"

# 1. packages
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  step "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  step "packages present"
fi

# 2. binaries
read -r -a build <<<"${NODELET_BUILD:-./cmd/...}"
mkdir -p bin
go build -o bin/ "${build[@]}" ./scripts/setuptool
# The daemons are one executable, nodeletd, run as nodelet-<daemon> links.
if [[ -x bin/nodeletd ]]; then bin/nodeletd link bin; fi
step "built ${build[*]} and setuptool into bin/"
install -D -m 0644 deploy/systemd/sysusers.d/nodelet.conf /etc/sysusers.d/nodelet.conf
systemd-sysusers /etc/sysusers.d/nodelet.conf
step "users and group of /etc/sysusers.d/nodelet.conf made (systemd-sysusers)"
if [ "$CONTAINERD_MAJOR" = 2 ]; then
  scripts/containerd2.sh install "$CONTAINERD2_DIR" >/dev/null
  step "containerd $(scripts/containerd2.sh version) installed in $CONTAINERD2_DIR (built by scripts/containerd2.sh)"
fi

containerd_up() { [ -S "$CONTAINERD_SOCKET" ] && "$CTR" --connect-timeout 1s --address "$CONTAINERD_SOCKET" version >/dev/null 2>&1; }
if containerd_up; then
  # The config about to be written is for one major only: a containerd of
  # the other answering there would run on with its config replaced, and
  # the images would go into the wrong root.
  server=$("$CTR" --address "$CONTAINERD_SOCKET" version 2>/dev/null | awk '/^Server:/ { s = 1 } s && $1 == "Version:" { print $2; exit }')
  case $CONTAINERD_MAJOR:$server in
  2:v2.* | 2:2.* | 1:v1.* | 1:1.*) ;;
  2:*) die "a containerd ${server:-of unknown version} answers on $CONTAINERD_SOCKET; stop it, then run setup again (or setup --containerd=1 to keep it)" ;;
  *) die "a containerd ${server:-of unknown version} answers on $CONTAINERD_SOCKET; stop it, then run setup --containerd=1 again (or setup without it to keep it)" ;;
  esac
fi

# 3. containerd config
bin/setuptool containerd-config --out "$CONTAINERD_CONFIG" \
  --root "$CONTAINERD_ROOT" --state "$CONTAINERD_STATE" --socket "$CONTAINERD_SOCKET" \
  --cni-conf-dir "$CNI_CONF_DIR" --cni-bin-dir "$CNI_BIN_DIR" --sandbox-image nodelet.local/pause:3.10 \
  --cri-group nodelet-cri "${CONFIG_MAJOR[@]}"
step "wrote $CONTAINERD_CONFIG"

# 4. CNI conflist
bin/setuptool cni-config --out-dir "$CNI_CONF_DIR" --subnet "$SUBNET" --bridge "$BRIDGE" \
  --cni-bin-dir "$CNI_BIN_DIR"
step "wrote $CNI_CONF_DIR/10-nodelet.conflist (bridge $BRIDGE, subnet $SUBNET)"

# 5. images
bin/setuptool images >/dev/null
step "images built in ${NODELET_CACHE:-$HOME/.cache/nodelet}/images"

# 6. import
if containerd_up; then
  bin/setuptool images --import "$CONTAINERD_SOCKET" | sed 's/^/setup: /'
else
  # Another containerd may own this root while answering on another socket
  # (a `nodelet up` whose runtime.endpoint differs). A second one on the same
  # root would wait on the metadata lock, fail, and on exit remove the socket
  # file it made: refuse instead, naming the holder.
  meta=$CONTAINERD_ROOT/io.containerd.metadata.v1.bolt/meta.db
  if [ -e "$meta" ] && ! flock -n "$meta" true 2>/dev/null; then
    holder=$(fuser "$meta" 2>/dev/null | tr -s ' ' | sed 's/^ //')
    die "a containerd (pid ${holder:-unknown}) already uses $CONTAINERD_ROOT but does not answer on $CONTAINERD_SOCKET; import the images into it, or stop it, and run setup again"
  fi
  mkdir -p "$CONTAINERD_STATE"
  log=$CONTAINERD_STATE/setup-containerd.log
  "$CONTAINERD" --config "$CONTAINERD_CONFIG" >>"$log" 2>&1 &
  pid=$!
  trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT
  for _ in $(seq 100); do
    containerd_up && break
    kill -0 "$pid" 2>/dev/null || die "containerd exited at start, see $log"
    sleep 0.1
  done
  containerd_up || die "containerd did not answer on $CONTAINERD_SOCKET within 10s, see $log"
  bin/setuptool images --import "$CONTAINERD_SOCKET" | sed 's/^/setup: /'
  kill -TERM "$pid"
  wait "$pid" 2>/dev/null || true
  trap - EXIT
  step "stopped the containerd started for the import"
fi
step "done"
