// Command grpchealth is a tiny gRPC server for the prober's tests: it
// serves grpc.health.v1 on -port: the server ("") is always SERVING,
// -service is SERVING while the file -file exists, NOT_SERVING otherwise. It
// is built static (CGO_ENABLED=0) and mounted into a busybox container.
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func main() {
	port := flag.Int("port", 9090, "port to listen on")
	service := flag.String("service", "", "service name to report besides the server")
	file := flag.String("file", "/tmp/serving", "SERVING while this file exists")
	flag.Parse()
	l, err := net.Listen("tcp", fmt.Sprintf(":%d", *port))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	hs := health.NewServer()
	set := func() {
		st := healthpb.HealthCheckResponse_NOT_SERVING
		if _, err := os.Stat(*file); err == nil {
			st = healthpb.HealthCheckResponse_SERVING
		}
		hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
		if *service != "" {
			hs.SetServingStatus(*service, st)
		}
	}
	set()
	go func() {
		for range time.Tick(100 * time.Millisecond) {
			set()
		}
	}()
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, hs)
	fmt.Println("serving grpc.health.v1 on", l.Addr())
	if err := s.Serve(l); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
