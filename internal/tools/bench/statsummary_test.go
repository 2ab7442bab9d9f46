package bench

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// A /stats/summary answer counts each of the burst's pods once, and ignores
// the node's other pods; an answer without a node is refused.
func TestSummaryPods(t *testing.T) {
	body, err := os.ReadFile("testdata/summary.json")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		body    string
		want    []string
		pods    int
		wantErr string
	}{
		{"both pods, one listed twice", string(body), []string{"p000-bench", "p001-bench"}, 2, ""},
		{"a pod not listed", string(body), []string{"p000-bench", "p001-bench", "p002-bench"}, 2, ""},
		{"none of the burst", string(body), []string{"p099-bench"}, 0, ""},
		{"no node", `{"node":{},"pods":[]}`, nil, 0, "names no node"},
		{"not JSON", `<html>`, nil, 0, "decode /stats/summary"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want := map[string]bool{}
			for _, p := range tc.want {
				want[Namespace+"/"+p] = true
			}
			n, err := summaryPods(strings.NewReader(tc.body), want)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || n != tc.pods {
				t.Fatalf("summaryPods = %d, %v; want %d", n, err, tc.pods)
			}
		})
	}
}

// measureSummary times k GETs against a real HTTP server, keeps the fewest
// pods any answer listed, and fails on an error answer.
func TestMeasureSummary(t *testing.T) {
	body, err := os.ReadFile("testdata/summary.json")
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	mux := http.NewServeMux()
	mux.HandleFunc("GET /stats/summary", func(w http.ResponseWriter, r *http.Request) {
		calls++
		if calls == 2 { // one answer lists only p000
			_, _ = w.Write(bytes.Replace(body, []byte("p001-bench"), []byte("p999-bench"), -1))
			return
		}
		_, _ = w.Write(body)
	})
	mux.HandleFunc("GET /broken/stats/summary", func(w http.ResponseWriter, r *http.Request) {})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })

	want := map[string]bool{Namespace + "/p000-bench": true, Namespace + "/p001-bench": true}
	cpu := time.Duration(0)
	agent := func() time.Duration { cpu += 3 * time.Millisecond; return cpu }
	runtime := func() time.Duration { return 0 }
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := measureSummary(ctx, l.Addr().String(), 3, want, agent, runtime)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Requests) != 3 || calls != 3 || s.Pods != 1 || s.Bytes != len(body) || s.AgentCPU != Dur(3*time.Millisecond) {
		t.Fatalf("measured %+v after %d calls; want 3 requests, 1 pod, %d bytes, 3ms agent CPU", s, calls, len(body))
	}
	for _, d := range s.Requests {
		if d <= 0 {
			t.Fatalf("request time %v", d)
		}
	}
	if s, err := measureSummary(ctx, l.Addr().String(), 0, want, agent, runtime); s != nil || err != nil {
		t.Fatalf("k=0: %+v, %v; want nothing measured", s, err)
	}
	if _, err := measureSummary(ctx, l.Addr().String()+"/nope", 1, want, agent, runtime); err == nil {
		t.Fatal("an unreachable agent measured")
	}
	if _, err := measureSummary(ctx, l.Addr().String()+"/broken", 1, want, agent, runtime); err == nil || !strings.Contains(err.Error(), "decode") {
		t.Fatalf("an empty answer: %v, want a decode error", err)
	}
}

// Rounds pool their requests; the per-request CPU is the rounds' median.
func TestSummarizeSummary(t *testing.T) {
	ms := func(x ...int) []Dur {
		out := make([]Dur, len(x))
		for i, v := range x {
			out[i] = Dur(time.Duration(v) * time.Millisecond)
		}
		return out
	}
	got := summarizeSummary([]*SummaryLatency{
		{Requests: ms(10, 20), Pods: 110, Bytes: 900, AgentCPU: ms(4)[0], RuntimeCPU: ms(40)[0]},
		nil,
		{Requests: ms(30, 40), Pods: 109, Bytes: 1000, AgentCPU: ms(8)[0], RuntimeCPU: ms(80)[0]},
	})
	if got == nil || got.Latency.N != 4 || got.Latency.P50 != ms(20)[0] || got.Latency.P99 != ms(40)[0] ||
		got.Pods != 109 || got.Bytes != 1000 || got.AgentCPU != ms(3)[0] || got.RuntimeCPU != ms(30)[0] {
		t.Fatalf("summarizeSummary = %+v", got)
	}
	if summarizeSummary([]*SummaryLatency{nil, {}}) != nil {
		t.Fatal("no requests summarised as something")
	}
}
