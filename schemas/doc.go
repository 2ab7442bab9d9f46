// Package schemas holds the versioned messages that nodelet's daemons exchange
// over the bus, and the envelope every one of them travels in.
//
// A message type names its schema with the major version inside it
// (nodelet.v1.PodDesired). An incompatible change makes a new type with a v2
// name and v2 subjects, so a rolling upgrade can run both side by side.
// Pods and statuses are k8s.io/api types, never copies of them.
//
// schemas/v1/*.json are JSON Schema documents generated from these types by
// `go generate ./schemas/...`; a test fails when they drift.
package schemas

//go:generate go run ./gen -out v1
