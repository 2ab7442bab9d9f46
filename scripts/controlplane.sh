#!/usr/bin/env bash
# controlplane.sh — a real Kubernetes control plane (etcd + kube-apiserver) on
# loopback for developing and testing nodelet. No controller-manager or
# scheduler runs: pods are bound by setting spec.nodeName yourself.
#
# Usage: scripts/controlplane.sh build|build-conformance|start|stop|status|env [STATE_DIR]
#        scripts/controlplane.sh tools NAME...
#
#   build   build (or reuse the cached) kube-apiserver and kubectl, make sure
#           etcd is installed; prints KUBE_APISERVER=, KUBECTL=, ETCD= lines
#           on stdout (everything else goes to stderr).
#   build-conformance
#           also build kube-controller-manager, kube-scheduler, agnhost, nnp,
#           sample-apiserver, etcd-static, ginkgo and e2e.test
#           (scripts/conformance.sh); prints their paths the same way.
#   tools NAME...
#           build only the named ones of those (tests of the harness), or
#           kube-proxy (any command of k8s.io/kubernetes/cmd), coredns
#           (static, from the tools module scripts/coredns) or
#           sample-device-plugin (test/images/sample-device-plugin, static)
#           or dra-test-driver (test/e2e/dra/test-driver, static).
#   start   build if needed, then start etcd and kube-apiserver on free
#           127.0.0.1 ports under STATE_DIR, write admin.kubeconfig and
#           node.kubeconfig there and print how to use them. Idempotent.
#   stop    stop kube-apiserver, then etcd. Keeps STATE_DIR (etcd data,
#           certificates, tokens) so a later start resumes the same cluster.
#   status  say whether the control plane in STATE_DIR is running.
#   env     print shell exports: eval "$(scripts/controlplane.sh env)".
#
# STATE_DIR defaults to $NODELET_CONTROLPLANE_DIR or /tmp/nodelet-controlplane.
# Binaries are cached in ${NODELET_CACHE:-$HOME/.cache/nodelet}/k8s-<version>/.
# The node identity is system:node:<name>, name from $NODELET_NODE_NAME or
# `hostname`. etcd comes from $NODELET_ETCD or PATH (Debian: etcd-server; it is
# installed with apt-get when missing and running as root).
set -euo pipefail

K8S_VERSION=v1.37.2
K8S_MINOR=37

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TOOLS_DIR=$REPO_ROOT/scripts/k8s
# CoreDNS has a tools module of its own: its dependencies (cloud SDKs, the
# Kubernetes client at CoreDNS's version) stay out of scripts/k8s's graph.
COREDNS_DIR=$REPO_ROOT/scripts/coredns
CACHE_ROOT=${NODELET_CACHE:-${HOME:-/root}/.cache/nodelet}
BIN_DIR=$CACHE_ROOT/k8s-$K8S_VERSION
KUBE_APISERVER=$BIN_DIR/kube-apiserver
KUBECTL=$BIN_DIR/kubectl
SERVICE_CIDR=10.96.0.0/16

log() { echo "controlplane: $*" >&2; }
die() { log "error: $*"; exit 1; }

# ---------------------------------------------------------------- build ----

ldflags() {
	local f="" pkg
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		f+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$K8S_MINOR"
	done
	echo "${f# }"
}

find_go() {
	if command -v go >/dev/null 2>&1; then
		command -v go
	elif [[ -x /usr/local/go/bin/go ]]; then
		echo /usr/local/go/bin/go
	else
		die "go not found in PATH (needed to build kube-apiserver and kubectl)"
	fi
}

# build_bins NAME... builds (or reuses) the named tools into BIN_DIR, serialised
# with a lock against concurrent builds (parallel test binaries, several
# shells). Names: the commands of k8s.io/kubernetes/cmd, agnhost
# (test/images/agnhost, static), e2e.test (the e2e suite's test binary) and
# coredns (static, scripts/coredns).
have_bin() {
	[[ -x $BIN_DIR/$1 ]] || return 1
	case $1 in
	agnhost) [[ -f $BIN_DIR/agnhost-porter/localhost.key && -f $BIN_DIR/agnhost-pages/nautilus/data.json ]] ;;
	# BIN_DIR is named after the Kubernetes version only: a coredns of
	# another version than scripts/coredns/go.mod's is rebuilt.
	coredns) [[ $("$BIN_DIR/coredns" -version 2>/dev/null | head -n1) == "CoreDNS-$(coredns_version | sed 's/^v//')" ]] ;;
	esac
}

# coredns_version prints the CoreDNS version scripts/coredns/go.mod requires.
coredns_version() {
	awk '$1 == "github.com/coredns/coredns" { print $2 } $1 == "require" && $2 == "github.com/coredns/coredns" { print $3 }' \
		"$COREDNS_DIR/go.mod"
}

build_bins() {
	local missing=() n
	for n in "$@"; do have_bin "$n" || missing+=("$n"); done
	[[ ${#missing[@]} -eq 0 ]] && return 0
	mkdir -p "$BIN_DIR"
	exec 9>"$BIN_DIR/.build.lock"
	flock 9
	missing=()
	for n in "$@"; do have_bin "$n" || missing+=("$n"); done
	if [[ ${#missing[@]} -eq 0 ]]; then
		flock -u 9
		exec 9>&-
		return 0
	fi
	local gobin tmp start cmds=() rc=0
	gobin=$(find_go)
	tmp=$(mktemp -d "$BIN_DIR/.build.XXXXXX")
	start=$SECONDS
	for n in "${missing[@]}"; do
		case $n in
		agnhost | nnp | sample-apiserver | sample-device-plugin | dra-test-driver | etcd-static | e2e.test | ginkgo | coredns) ;;
		*) cmds+=("k8s.io/kubernetes/cmd/$n") ;;
		esac
	done
	local versions="Kubernetes $K8S_VERSION"
	[[ " ${missing[*]} " == *" coredns "* ]] && versions+=", CoreDNS $(coredns_version)"
	log "building ${missing[*]} ($versions) into $BIN_DIR (a cold build takes several minutes)..."
	(
		cd "$TOOLS_DIR"
		export GOWORK=off
		if [[ ${#cmds[@]} -gt 0 ]]; then
			"$gobin" build -mod=readonly -trimpath -ldflags "$(ldflags)" -o "$tmp/" "${cmds[@]}"
		fi
		if [[ " ${missing[*]} " == *" agnhost "* ]]; then
			# The image's binary: static, as upstream builds it.
			CGO_ENABLED=0 "$gobin" build -mod=readonly -trimpath -ldflags "$(ldflags)" -o "$tmp/agnhost" \
				k8s.io/kubernetes/test/images/agnhost
			# What the agnhost image adds besides the binary (porter's TLS pair).
			mkdir -p "$BIN_DIR/agnhost-porter"
			cp "$("$gobin" list -mod=readonly -f '{{.Dir}}' k8s.io/kubernetes/test/images/agnhost/porter)"/localhost.{crt,key} \
				"$BIN_DIR/agnhost-porter/"
			# The pages of kitten and nautilus, images built FROM agnhost.
			local k8s page
			k8s=$("$gobin" list -mod=readonly -m -f '{{.Dir}}' k8s.io/kubernetes)
			for page in kitten nautilus; do
				mkdir -p "$BIN_DIR/agnhost-pages/$page"
				install -m 0644 "$k8s/test/images/$page/html/"* "$BIN_DIR/agnhost-pages/$page/"
			done
		fi
		if [[ " ${missing[*]} " == *" sample-apiserver "* ]]; then
			# The Aggregator spec's extension server (test/images/sample-apiserver).
			CGO_ENABLED=0 "$gobin" build -mod=readonly -trimpath -ldflags "-s -w $(ldflags)" -o "$tmp/sample-apiserver" \
				k8s.io/sample-apiserver
		fi
		if [[ " ${missing[*]} " == *" sample-device-plugin "* ]]; then
			# The device plugin the kubelet's e2e tests run as a DaemonSet
			# (test/images/sample-device-plugin), static for its image.
			CGO_ENABLED=0 "$gobin" build -mod=readonly -trimpath -ldflags "-s -w" -o "$tmp/sample-device-plugin" \
				k8s.io/kubernetes/test/images/sample-device-plugin
		fi
		if [[ " ${missing[*]} " == *" dra-test-driver "* ]]; then
			# The DRA driver the e2e suite's DRA specs run (test/e2e/dra/
			# test-driver: its kubelet-plugin subcommand), static for its image.
			CGO_ENABLED=0 "$gobin" build -mod=readonly -trimpath -ldflags "-s -w" -o "$tmp/dra-test-driver" \
				k8s.io/kubernetes/test/e2e/dra/test-driver
		fi
		if [[ " ${missing[*]} " == *" etcd-static "* ]]; then
			# The etcd beside it (registry.k8s.io/etcd's /usr/local/bin/etcd), at
			# the module graph's version; Debian's etcd is dynamically linked.
			CGO_ENABLED=0 "$gobin" build -mod=readonly -trimpath -ldflags "-s -w" -o "$tmp/etcd-static" \
				go.etcd.io/etcd/server/v3
		fi
		if [[ " ${missing[*]} " == *" nnp "* ]]; then
			# The nonewprivs image's setuid program.
			CGO_ENABLED=0 "$gobin" build -mod=readonly -trimpath -o "$tmp/nnp" k8s.io/kubernetes/test/images/nonewprivs
		fi
		if [[ " ${missing[*]} " == *" ginkgo "* ]]; then
			# The runner that spreads the suite over several processes.
			"$gobin" build -mod=readonly -trimpath -o "$tmp/ginkgo" github.com/onsi/ginkgo/v2/ginkgo
		fi
		if [[ " ${missing[*]} " == *" coredns "* ]]; then
			# Static, as upstream's Makefile builds it for its image:
			# CGO_ENABLED=0, -tags grpcnotrace, -s -w, the version as GitCommit.
			local v
			v=$(coredns_version)
			(cd "$COREDNS_DIR" && CGO_ENABLED=0 "$gobin" build -mod=readonly -trimpath -tags grpcnotrace \
				-ldflags "-s -w -X github.com/coredns/coredns/coremain.GitCommit=$v" -o "$tmp/coredns" \
				github.com/coredns/coredns)
		fi
		if [[ " ${missing[*]} " == *" e2e.test "* ]]; then
			# -vet=off: otherwise go vets every dependency of the suite.
			"$gobin" test -c -vet=off -mod=readonly -trimpath -ldflags "$(ldflags)" -o "$tmp/e2e.test" \
				k8s.io/kubernetes/test/e2e
		fi
	) >&2 || rc=$?
	if [[ $rc -ne 0 ]]; then
		rm -rf "$tmp"
		flock -u 9
		die "building ${missing[*]} failed"
	fi
	for n in "${missing[@]}"; do mv -f "$tmp/$n" "$BIN_DIR/$n"; done
	rm -rf "$tmp"
	log "built ${missing[*]} in $((SECONDS - start))s"
	flock -u 9
	exec 9>&-
}

build_k8s() { build_bins kube-apiserver kubectl; }

# The tools scripts/conformance.sh needs besides the control plane.
CONFORMANCE_BINS=(kube-controller-manager kube-scheduler agnhost nnp sample-apiserver etcd-static ginkgo e2e.test)

ensure_etcd() {
	ETCD=${NODELET_ETCD:-}
	if [[ -z $ETCD ]]; then
		ETCD=$(command -v etcd || true)
	fi
	if [[ -z $ETCD && -x /usr/bin/etcd ]]; then
		ETCD=/usr/bin/etcd
	fi
	if [[ -z $ETCD ]]; then
		if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
			log "etcd not found; installing Debian package etcd-server"
			DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends etcd-server >&2 ||
				{ apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends etcd-server >&2; } ||
				die "could not install etcd-server"
			ETCD=/usr/bin/etcd
		else
			die "etcd not found: install it (Debian: apt-get install etcd-server) or set NODELET_ETCD"
		fi
	fi
	[[ -x $ETCD ]] || die "etcd at $ETCD is not executable"
}

cmd_build_conformance() { cmd_tools "${CONFORMANCE_BINS[@]}"; }

cmd_tools() {
	cmd_build
	build_bins "$@"
	local n
	for n in "$@"; do echo "$(echo "$n" | tr 'a-z.-' 'A-Z__')=$BIN_DIR/$n"; done
}

cmd_build() {
	ensure_etcd
	build_k8s
	echo "KUBE_APISERVER=$KUBE_APISERVER"
	echo "KUBECTL=$KUBECTL"
	echo "ETCD=$ETCD"
}

# ------------------------------------------------------------ processes ----

# pid_of NAME prints the pid of STATE_DIR's NAME process if it is running.
pid_of() {
	local f=$STATE_DIR/$1.pid pid
	[[ -f $f ]] || return 1
	pid=$(<"$f")
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	# Make sure the pid was not reused by an unrelated process.
	[[ -r /proc/$pid/cmdline ]] || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$STATE_DIR/" || return 1
	echo "$pid"
}

# alive PID: the process exists and is not a zombie (our daemons are started
# with setsid and reparented to init, which may reap them late).
alive() {
	[[ -d /proc/$1 ]] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null
}

stop_proc() {
	local name=$1 pid i
	if pid=$(pid_of "$name"); then
		log "stopping $name (pid $pid)"
		kill -TERM "$pid" 2>/dev/null || true
		for ((i = 0; i < 300; i++)); do
			alive "$pid" || break
			sleep 0.1
		done
		if alive "$pid"; then
			log "$name did not stop in 30s; killing it"
			kill -KILL "$pid" 2>/dev/null || true
			for ((i = 0; i < 50; i++)); do
				alive "$pid" || break
				sleep 0.1
			done
		fi
	fi
	rm -f "$STATE_DIR/$name.pid"
}

port_in_use() {
	if command -v ss >/dev/null 2>&1; then
		[[ -n $(ss -Htln "sport = :$1" 2>/dev/null) ]]
	else
		(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
	fi
}

# free_port prints a free TCP port on 127.0.0.1 below the ephemeral range,
# different from the ports given as arguments.
free_port() {
	local p i used
	for ((i = 0; i < 200; i++)); do
		p=$((20000 + RANDOM % 12000))
		used=0
		for u in "$@"; do [[ $u == "$p" ]] && used=1; done
		((used)) && continue
		port_in_use "$p" || { echo "$p"; return 0; }
	done
	die "no free port found"
}

wait_port() { # wait_port PORT PIDNAME SECONDS
	local i
	for ((i = 0; i < $3 * 10; i++)); do
		port_in_use "$1" && return 0
		pid_of "$2" >/dev/null || return 1
		sleep 0.1
	done
	return 1
}

# ---------------------------------------------------------- credentials ----

rand_hex() { od -An -N16 -tx1 /dev/urandom | tr -d ' \n'; }

make_pki() {
	local pki=$STATE_DIR/pki
	[[ -f $pki/apiserver.crt && -f $pki/sa.key && -f $pki/apiserver-kubelet-client.crt ]] && return 0
	command -v openssl >/dev/null 2>&1 || die "openssl not found (apt-get install openssl)"
	mkdir -p "$pki"
	(
		cd "$pki"
		umask 077
		if [[ ! -f ca.crt ]]; then
			openssl ecparam -name prime256v1 -genkey -noout -out ca.key 2>/dev/null
			openssl req -x509 -new -key ca.key -sha256 -days 3650 -subj "/CN=nodelet-controlplane-ca" \
				-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
				-out ca.crt 2>/dev/null
			openssl ecparam -name prime256v1 -genkey -noout -out apiserver.key 2>/dev/null
			openssl req -new -key apiserver.key -subj "/CN=kube-apiserver" -out apiserver.csr 2>/dev/null
			printf '%s\n' \
				"basicConstraints=CA:FALSE" \
				"keyUsage=critical,digitalSignature,keyEncipherment" \
				"extendedKeyUsage=serverAuth" \
				"subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc" \
				>apiserver.ext
			openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -sha256 \
				-extfile apiserver.ext -out apiserver.crt 2>/dev/null
			openssl genrsa -out sa.key 2048 2>/dev/null
			openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
		fi
		# kube-apiserver's client certificate towards the kubelet API
		# (nodelet-server), as kubeadm's apiserver-kubelet-client: group
		# system:masters, signed by the cluster CA (the node's
		# server.authentication.x509.clientCAFile).
		openssl ecparam -name prime256v1 -genkey -noout -out apiserver-kubelet-client.key 2>/dev/null
		openssl req -new -key apiserver-kubelet-client.key -subj "/O=system:masters/CN=kube-apiserver-kubelet-client" \
			-out apiserver-kubelet-client.csr 2>/dev/null
		printf '%s\n' "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
			"extendedKeyUsage=clientAuth" >apiserver-kubelet-client.ext
		openssl x509 -req -in apiserver-kubelet-client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -sha256 \
			-extfile apiserver-kubelet-client.ext -out apiserver-kubelet-client.crt 2>/dev/null
		rm -f apiserver.csr apiserver.ext apiserver-kubelet-client.csr apiserver-kubelet-client.ext ca.srl
		chmod 644 ca.crt apiserver.crt sa.pub apiserver-kubelet-client.crt
	) || die "generating certificates with openssl failed"
}

make_tokens() {
	local f
	for f in admin node; do
		[[ -s $STATE_DIR/$f.token ]] || (umask 077 && rand_hex >"$STATE_DIR/$f.token")
	done
	ADMIN_TOKEN=$(<"$STATE_DIR/admin.token")
	NODE_TOKEN=$(<"$STATE_DIR/node.token")
	(
		umask 077
		{
			echo "$ADMIN_TOKEN,nodelet-admin,nodelet-admin,\"system:masters\""
			echo "$NODE_TOKEN,system:node:$NODE_NAME,system:node:$NODE_NAME,\"system:nodes\""
		} >"$STATE_DIR/tokens.csv"
	)
}

write_kubeconfig() { # write_kubeconfig FILE USER TOKEN
	local ca
	ca=$(base64 -w0 <"$STATE_DIR/pki/ca.crt")
	(
		umask 077
		cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: nodelet-local
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority-data: $ca
users:
- name: $2
  user:
    token: $3
contexts:
- name: $2@nodelet-local
  context:
    cluster: nodelet-local
    user: $2
    namespace: default
current-context: $2@nodelet-local
EOF
	)
}

# ---------------------------------------------------------------- start ----

print_usage() {
	local url=""
	[[ -f $STATE_DIR/ports.env ]] && url="https://127.0.0.1:$(. "$STATE_DIR/ports.env" && echo "$APISERVER_PORT")"
	cat >&2 <<EOF
controlplane: running in $STATE_DIR
  kube-apiserver   $url  (log: $STATE_DIR/kube-apiserver.log)
  admin            export KUBECONFIG=$STATE_DIR/admin.kubeconfig   (group system:masters)
  node             $STATE_DIR/node.kubeconfig   (system:node:$(cat "$STATE_DIR/node-name" 2>/dev/null), group system:nodes)
                   -> set node.kubeconfig to it in the nodelet config
  kubectl          $KUBECTL
  all at once      eval "\$($REPO_ROOT/scripts/controlplane.sh env $STATE_DIR)"
  stop             $REPO_ROOT/scripts/controlplane.sh stop $STATE_DIR
EOF
}

cmd_start() {
	mkdir -p "$STATE_DIR"
	local apid epid
	apid=$(pid_of kube-apiserver || true)
	epid=$(pid_of etcd || true)
	if [[ -n $apid && -n $epid ]]; then
		log "already running (kube-apiserver pid $apid, etcd pid $epid)"
		print_usage
		return 0
	fi
	if [[ -n $apid || -n $epid ]]; then
		log "half running; restarting"
		stop_proc kube-apiserver
		stop_proc etcd
	fi

	ensure_etcd
	build_k8s

	NODE_NAME=${NODELET_NODE_NAME:-$(hostname)}
	echo "$NODE_NAME" >"$STATE_DIR/node-name"
	make_pki
	make_tokens

	# Reuse the previous ports when they are free, so kubeconfigs copied
	# elsewhere keep working across stop/start; etcd's data dir remembers its
	# peer URL, so a new peer port means a fresh etcd data dir.
	local ETCD_PORT="" ETCD_PEER_PORT="" APISERVER_PORT=""
	if [[ -f $STATE_DIR/ports.env ]]; then
		# shellcheck disable=SC1091
		. "$STATE_DIR/ports.env"
	fi
	local old_peer=$ETCD_PEER_PORT
	[[ -n $ETCD_PORT ]] && port_in_use "$ETCD_PORT" && ETCD_PORT=""
	[[ -n $ETCD_PEER_PORT ]] && port_in_use "$ETCD_PEER_PORT" && ETCD_PEER_PORT=""
	[[ -n $APISERVER_PORT ]] && port_in_use "$APISERVER_PORT" && APISERVER_PORT=""
	[[ -n $ETCD_PORT ]] || ETCD_PORT=$(free_port "$ETCD_PEER_PORT" "$APISERVER_PORT")
	[[ -n $ETCD_PEER_PORT ]] || ETCD_PEER_PORT=$(free_port "$ETCD_PORT" "$APISERVER_PORT")
	[[ -n $APISERVER_PORT ]] || APISERVER_PORT=$(free_port "$ETCD_PORT" "$ETCD_PEER_PORT")
	if [[ $old_peer != "$ETCD_PEER_PORT" ]]; then
		rm -rf "$STATE_DIR/etcd"
	fi
	printf 'ETCD_PORT=%s\nETCD_PEER_PORT=%s\nAPISERVER_PORT=%s\n' \
		"$ETCD_PORT" "$ETCD_PEER_PORT" "$APISERVER_PORT" >"$STATE_DIR/ports.env"

	log "starting etcd on 127.0.0.1:$ETCD_PORT"
	setsid "$ETCD" \
		--name=nodelet \
		--data-dir="$STATE_DIR/etcd" \
		--listen-client-urls="http://127.0.0.1:$ETCD_PORT" \
		--advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
		--listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
		--initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
		--initial-cluster="nodelet=http://127.0.0.1:$ETCD_PEER_PORT" \
		--logger=zap --log-outputs=stderr \
		</dev/null >"$STATE_DIR/etcd.log" 2>&1 &
	echo $! >"$STATE_DIR/etcd.pid"
	if ! wait_port "$ETCD_PORT" etcd 30; then
		tail -n 20 "$STATE_DIR/etcd.log" >&2 || true
		stop_proc etcd
		die "etcd did not start (log: $STATE_DIR/etcd.log)"
	fi

	local pki=$STATE_DIR/pki
	log "starting kube-apiserver on https://127.0.0.1:$APISERVER_PORT"
	setsid "$KUBE_APISERVER" \
		--etcd-servers="http://127.0.0.1:$ETCD_PORT" \
		--bind-address=127.0.0.1 \
		--secure-port="$APISERVER_PORT" \
		--advertise-address=127.0.0.1 \
		--endpoint-reconciler-type=none \
		--tls-cert-file="$pki/apiserver.crt" \
		--tls-private-key-file="$pki/apiserver.key" \
		--client-ca-file="$pki/ca.crt" \
		--token-auth-file="$STATE_DIR/tokens.csv" \
		--enable-bootstrap-token-auth \
		--authorization-mode=Node,RBAC \
		--enable-admission-plugins=NodeRestriction \
		--allow-privileged=true \
		--service-account-issuer=https://kubernetes.default.svc \
		--service-account-key-file="$pki/sa.pub" \
		--service-account-signing-key-file="$pki/sa.key" \
		--service-cluster-ip-range="$SERVICE_CIDR" \
		--cert-dir="$STATE_DIR/apiserver-certs" \
		--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname \
		--kubelet-client-certificate="$pki/apiserver-kubelet-client.crt" \
		--kubelet-client-key="$pki/apiserver-kubelet-client.key" \
		</dev/null >"$STATE_DIR/kube-apiserver.log" 2>&1 &
	echo $! >"$STATE_DIR/kube-apiserver.pid"

	write_kubeconfig "$STATE_DIR/admin.kubeconfig" nodelet-admin "$ADMIN_TOKEN"
	write_kubeconfig "$STATE_DIR/node.kubeconfig" "system:node:$NODE_NAME" "$NODE_TOKEN"

	local i ready=""
	for ((i = 0; i < 600; i++)); do
		if ! pid_of kube-apiserver >/dev/null; then
			break
		fi
		if [[ $("$KUBECTL" --kubeconfig="$STATE_DIR/admin.kubeconfig" get --raw /readyz 2>/dev/null) == ok ]]; then
			ready=1
			break
		fi
		sleep 0.2
	done
	if [[ -z $ready ]]; then
		tail -n 30 "$STATE_DIR/kube-apiserver.log" >&2 || true
		stop_proc kube-apiserver
		stop_proc etcd
		die "kube-apiserver did not become ready (log: $STATE_DIR/kube-apiserver.log)"
	fi

	# No controller-manager runs: create what it would have made in "default".
	local k=("$KUBECTL" --kubeconfig="$STATE_DIR/admin.kubeconfig" -n default)
	"${k[@]}" create serviceaccount default --dry-run=client -o yaml | "${k[@]}" apply -f - >/dev/null
	"${k[@]}" create configmap kube-root-ca.crt --from-file=ca.crt="$pki/ca.crt" --dry-run=client -o yaml |
		"${k[@]}" apply -f - >/dev/null
	print_usage
}

# ------------------------------------------------------------ the rest ----

cmd_stop() {
	[[ -d $STATE_DIR ]] || { log "nothing to stop in $STATE_DIR"; return 0; }
	stop_proc kube-apiserver
	stop_proc etcd
	log "stopped"
}

cmd_status() {
	local apid epid
	apid=$(pid_of kube-apiserver || true)
	epid=$(pid_of etcd || true)
	if [[ -n $apid && -n $epid ]]; then
		print_usage
		return 0
	fi
	log "not running in $STATE_DIR${apid:+ (kube-apiserver pid $apid)}${epid:+ (etcd pid $epid)}"
	return 1
}

cmd_env() {
	pid_of kube-apiserver >/dev/null || log "warning: not running in $STATE_DIR (run: $0 start $STATE_DIR)"
	cat <<EOF
export KUBECONFIG=$STATE_DIR/admin.kubeconfig
export NODELET_NODE_KUBECONFIG=$STATE_DIR/node.kubeconfig
export NODELET_SERVER_AUTHENTICATION_X509_CLIENTCAFILE=$STATE_DIR/pki/ca.crt
export NODELET_NODE_NAME=$(cat "$STATE_DIR/node-name" 2>/dev/null || echo "${NODELET_NODE_NAME:-$(hostname)}")
export KUBECTL=$KUBECTL
EOF
}

main() {
	local cmd=${1:-}
	STATE_DIR=${2:-${NODELET_CONTROLPLANE_DIR:-/tmp/nodelet-controlplane}}
	STATE_DIR=$(realpath -m -- "$STATE_DIR")
	case $cmd in
	build) cmd_build ;;
	build-conformance) cmd_build_conformance ;;
	tools) shift; cmd_tools "$@"; return ;;
	start) cmd_start ;;
	stop) cmd_stop ;;
	status) cmd_status ;;
	env) cmd_env ;;
	*)
		sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
		exit 2
		;;
	esac
}

main "$@"
