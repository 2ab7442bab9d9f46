package config

import (
	"fmt"
	"net/url"
)

// Validate checks the sources section and returns its first problem as an
// *Error.
func (s *SourcesConfig) Validate() error {
	return firstError(
		func() error { return positiveDur("sources.fileCheckFrequency", s.FileCheckFrequency) },
		func() error { return positiveDur("sources.httpCheckFrequency", s.HTTPCheckFrequency) },
		func() error {
			if s.ManifestURL == "" {
				return nil
			}
			u, err := url.Parse(s.ManifestURL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return &Error{Key: "sources.manifestURL", Problem: fmt.Sprintf("%q is not an http(s) URL", s.ManifestURL)}
			}
			return nil
		},
		func() error { return absPath("sources.staticPodPath", s.StaticPodPath, true) },
		func() error { return positiveFloat("sources.kubeAPIQPS", s.KubeAPIQPS) },
		func() error { return positive("sources.kubeAPIBurst", s.KubeAPIBurst) },
	)
}

// Validate checks the prober section and returns its first problem as an
// *Error.
func (p *ProberConfig) Validate() error {
	return firstError(
		func() error { return nonNegative("prober.maxConcurrentProbes", p.MaxConcurrentProbes) },
	)
}

// Validate checks the status section and returns its first problem as an
// *Error.
func (s *StatusConfig) Validate() error {
	return firstError(
		func() error { return loopbackOrAny("status.readOnlyAddress", s.ReadOnlyAddress) },
		func() error {
			return positiveDur("status.nodeStatusUpdateFrequency", s.NodeStatusUpdateFrequency)
		},
		func() error {
			return positiveDur("status.nodeStatusReportFrequency", s.NodeStatusReportFrequency)
		},
		func() error { return positive("status.nodeLeaseDurationSeconds", s.NodeLeaseDurationSeconds) },
		func() error { return positiveFloat("status.eventRecordQPS", s.EventRecordQPS) },
		func() error { return positive("status.eventBurst", s.EventBurst) },
		func() error { return positiveDur("status.heartbeatStaleAfter", s.HeartbeatStaleAfter) },
	)
}
