// Package composerun holds the test that runs docker-compose.yml for real:
// a Docker engine from Debian's packages (docker.io) with the compose v2
// plugin (scripts/compose.sh), the image deploy/Dockerfile builds, a static
// pod through the composed node, one service restarted alone, and `docker
// compose down` leaving nothing behind. The package has no code of its own;
// the generator is internal/tools/units.
//
// The engine and the node's containerd run in a mount and a network
// namespace of the test's own, with the host paths the compose file names
// (/var/lib/nodelet, /etc/nodelet, /run/nodelet, /var/log/pods, ...) bound
// to a scratch directory there: the file runs unchanged, with its host
// network and host paths, and the machine's own node, iptables and other
// tests see none of it.
package composerun
