// Command nodelet-bus runs the node's message bus: an embedded nats-server
// with JetStream, on loopback, with one credential per component.
package main

import "github.com/nodelet/nodelet/services/busd"

func main() { busd.Main() }
