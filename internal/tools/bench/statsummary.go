package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// DefaultSummaryRequests is how many GETs of /stats/summary the bench
// times per agent run once the burst is running.
const DefaultSummaryRequests = 20

// SummaryLatency is K sequential GETs of an agent's /stats/summary on its
// read-only port (the kubelet's, or nodelet-server's with the same API and
// handler as its authenticated port) with the burst's pods running: what
// metrics-server and monitoring agents that read the summary pay, at the
// node's pod count.
type SummaryLatency struct {
	// Requests are the request → whole answer read times, in order.
	Requests []Dur `json:"requests"`
	// Pods is the fewest of the burst's pods any answer listed (an answer
	// that leaves out a running pod is one a reader cannot use).
	Pods int `json:"pods"`
	// Bytes is the last answer's size.
	Bytes int `json:"bytes"`
	// AgentCPU and RuntimeCPU are what the agent's processes and the
	// runtime (containerd and the shims) used over the K requests.
	AgentCPU   Dur `json:"agentCPU"`
	RuntimeCPU Dur `json:"runtimeCPU"`
}

// summaryPods counts the pods of want (namespace/name) that a
// /stats/summary answer lists, and checks it names the node.
func summaryPods(r io.Reader, want map[string]bool) (int, error) {
	var s struct {
		Node struct {
			NodeName string `json:"nodeName"`
		} `json:"node"`
		Pods []struct {
			PodRef struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"podRef"`
		} `json:"pods"`
	}
	if err := json.NewDecoder(r).Decode(&s); err != nil {
		return 0, fmt.Errorf("decode /stats/summary: %w", err)
	}
	if s.Node.NodeName == "" {
		return 0, fmt.Errorf("/stats/summary names no node")
	}
	n := 0
	seen := map[string]bool{}
	for _, p := range s.Pods {
		ref := p.PodRef.Namespace + "/" + p.PodRef.Name
		if want[ref] && !seen[ref] {
			seen[ref] = true
			n++
		}
	}
	return n, nil
}

// countingReader counts what passes through it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// measureSummary GETs addr's /stats/summary k times, one after the other,
// and times each until its answer is read and decoded. agentCPU and
// runtimeCPU read the processes' CPU so far.
func measureSummary(ctx context.Context, addr string, k int, want map[string]bool, agentCPU, runtimeCPU func() time.Duration) (*SummaryLatency, error) {
	if k <= 0 {
		return nil, nil
	}
	s := &SummaryLatency{Pods: len(want)}
	a0, r0 := agentCPU(), runtimeCPU()
	for range k {
		t0 := time.Now()
		var pods int
		err := readOnlyGet(ctx, addr, "/stats/summary", func(r io.Reader) error {
			cr := &countingReader{r: r}
			var err error
			pods, err = summaryPods(cr, want)
			_, _ = io.Copy(io.Discard, cr)
			s.Bytes = cr.n
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("/stats/summary: %w", err)
		}
		s.Requests = append(s.Requests, Dur(time.Since(t0)))
		s.Pods = min(s.Pods, pods)
	}
	s.AgentCPU, s.RuntimeCPU = Dur(agentCPU()-a0), Dur(runtimeCPU()-r0)
	return s, nil
}

// SummaryStats is /stats/summary over an agent's rounds.
type SummaryStats struct {
	// Latency pools every request of every round.
	Latency Dist `json:"latency"`
	// Pods is the fewest of the burst's pods an answer listed, over rounds.
	Pods  int `json:"pods"`
	Bytes int `json:"bytes"`
	// AgentCPU and RuntimeCPU are per request (medians over rounds).
	AgentCPU   Dur `json:"agentCPUPerRequest"`
	RuntimeCPU Dur `json:"runtimeCPUPerRequest"`
}

// summarizeSummary pools the rounds' /stats/summary measurements; nil when
// none was taken.
func summarizeSummary(ls []*SummaryLatency) *SummaryStats {
	var lat, agent, rt []time.Duration
	var out SummaryStats
	first := true
	for _, l := range ls {
		if l == nil || len(l.Requests) == 0 {
			continue
		}
		lat = append(lat, durs(l.Requests)...)
		k := time.Duration(len(l.Requests))
		agent, rt = append(agent, l.AgentCPU.D()/k), append(rt, l.RuntimeCPU.D()/k)
		if first || l.Pods < out.Pods {
			out.Pods = l.Pods
		}
		out.Bytes = max(out.Bytes, l.Bytes)
		first = false
	}
	if len(lat) == 0 {
		return nil
	}
	out.Latency = Distribution(lat)
	out.AgentCPU, out.RuntimeCPU = Dur(Median(agent)), Dur(Median(rt))
	return &out
}
