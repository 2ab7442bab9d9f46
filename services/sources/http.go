package sources

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/schemas"
)

// httpTimeout bounds one manifest request, as the kubelet's 10 s.
const httpTimeout = 10 * time.Second

// httpSource is the URL source: a Pod or PodList polled every period.
type httpSource struct {
	url    string
	header http.Header
	period time.Duration
	clock  clock.WithTicker
	log    *slog.Logger
	parser *staticParser
	client *http.Client

	origin  origin
	sent    bool
	lastErr string // the fetch error last reported, so a lasting outage is reported once
}

func newHTTPSource(url string, header map[string][]string, period time.Duration, clk clock.WithTicker, log *slog.Logger, parser *staticParser) *httpSource {
	h := http.Header{}
	for k, vs := range header {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	return &httpSource{
		url:    url,
		header: h,
		period: period,
		clock:  clk,
		log:    log.With("source", schemas.SourceHTTP),
		parser: parser,
		client: &http.Client{Timeout: httpTimeout},
		origin: origin{name: url},
	}
}

func (s *httpSource) run(ctx context.Context, out chan<- snapshot) {
	s.log.Info("Watching manifest URL", "url", s.url, "period", s.period)
	ticker := s.clock.NewTicker(s.period)
	defer ticker.Stop()
	for {
		if pods, changed := s.poll(ctx); changed {
			select {
			case out <- snapshot{source: schemas.SourceHTTP, pods: pods}:
			case <-ctx.Done():
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		}
	}
}

// poll fetches the manifest once. It returns the pods and true when they
// may have changed (or were never sent). A failed fetch keeps the last good
// pods and is reported on the bus once, until a fetch succeeds again.
func (s *httpSource) poll(ctx context.Context) ([]*corev1.Pod, bool) {
	data, err := s.fetch(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, false
		}
		if msg := err.Error(); msg != s.lastErr {
			s.lastErr = msg
			s.log.Warn("Failed to read pods from URL, keeping the last good pods", "url", s.url,
				"keptPods", len(s.origin.pods), "err", err)
			s.parser.emit(schemas.Event{
				Object:  corev1.ObjectReference{Kind: "Node", Name: s.parser.nodeName},
				Type:    corev1.EventTypeWarning,
				Reason:  ReasonFailedToFetchManifest,
				Message: fmt.Sprintf("Failed to read pods from %s, keeping the %d pods last read: %v", s.url, len(s.origin.pods), err),
			})
		}
		return nil, false
	}
	if s.lastErr != "" {
		s.log.Info("Successfully read pods from URL", "url", s.url)
		s.lastErr = ""
	}
	changed := !s.sent
	if len(data) == 0 {
		// As the kubelet: an empty body is an empty list.
		if s.origin.read || !s.sent {
			s.log.Info("Manifest URL returned no data, no pods from it", "url", s.url)
			changed = true
		}
		s.origin.pods = nil
		s.origin.read = false
	} else if s.parser.load(&s.origin, data) {
		changed = true
	}
	if !changed {
		return nil, false
	}
	s.sent = true
	pods := make([]*corev1.Pod, 0, len(s.origin.pods))
	for _, p := range s.origin.pods {
		pods = append(pods, p.DeepCopy())
	}
	return pods, true
}

func (s *httpSource) fetch(ctx context.Context) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return nil, err
	}
	for k, vs := range s.header {
		req.Header[k] = vs
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		return nil, fmt.Errorf("%s: %s", s.url, resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxManifestSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s: reading body: %w", s.url, err)
	}
	if len(data) > maxManifestSize {
		return nil, errors.New(s.url + ": body is larger than the manifest size limit")
	}
	return data, nil
}
