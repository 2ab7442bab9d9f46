package daemon

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

func TestMetricsSocketFederation(t *testing.T) {
	dir := t.TempDir()
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "nodelet_test_total", Help: "t"})
	reg.MustRegister(c, collectors.NewGoCollector())
	c.Add(3)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := ServeMetrics(ctx, dir, "prober", reg); err != nil {
		t.Fatal(err)
	}
	fams, err := NewRemoteGatherer(dir, "prober").Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(fams) != 1 || fams[0].GetName() != "nodelet_test_total" || fams[0].Metric[0].GetCounter().GetValue() != 3 {
		t.Fatalf("gathered %v", fams)
	}
	// A daemon that is down contributes nothing and no error.
	fams, err = NewRemoteGatherer(dir, "gc").Gather()
	if err != nil || len(fams) != 0 {
		t.Fatalf("absent daemon: %v %v", fams, err)
	}
}
