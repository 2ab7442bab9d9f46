package config

import (
	"fmt"
	"net"
)

// Validate checks the server section and returns its first problem as an
// *Error.
func (s *ServerConfig) Validate() error {
	return firstError(
		func() error {
			if net.ParseIP(s.Address) == nil {
				return &Error{Key: "server.address", Problem: fmt.Sprintf("%q is not an IP address", s.Address)}
			}
			return nil
		},
		func() error { return port("server.port", s.Port, false) },
		func() error { return port("server.readOnlyPort", s.ReadOnlyPort, true) },
		func() error {
			if net.ParseIP(s.HealthzBindAddress) == nil {
				return &Error{Key: "server.healthzBindAddress", Problem: fmt.Sprintf("%q is not an IP address", s.HealthzBindAddress)}
			}
			return nil
		},
		func() error { return port("server.healthzPort", s.HealthzPort, true) },
		func() error { return absPath("server.tlsCertFile", s.TLSCertFile, true) },
		func() error { return absPath("server.tlsPrivateKeyFile", s.TLSPrivateKeyFile, true) },
		func() error {
			if (s.TLSCertFile == "") != (s.TLSPrivateKeyFile == "") {
				return &Error{Key: "server.tlsCertFile", Problem: "server.tlsCertFile and server.tlsPrivateKeyFile go together"}
			}
			return nil
		},
		s.validateTLS,
		func() error {
			return absPath("server.authentication.x509.clientCAFile", s.Authentication.X509.ClientCAFile, true)
		},
		func() error {
			return positiveDur("server.authentication.webhook.cacheTTL", s.Authentication.Webhook.CacheTTL)
		},
		func() error {
			switch s.Authorization.Mode {
			case "Webhook", "AlwaysAllow":
				return nil
			}
			return &Error{Key: "server.authorization.mode", Problem: fmt.Sprintf("%q must be Webhook or AlwaysAllow", s.Authorization.Mode)}
		},
		func() error {
			return positiveDur("server.authorization.webhook.cacheAuthorizedTTL", s.Authorization.Webhook.CacheAuthorizedTTL)
		},
		func() error {
			return positiveDur("server.authorization.webhook.cacheUnauthorizedTTL", s.Authorization.Webhook.CacheUnauthorizedTTL)
		},
		func() error { return absPath("server.kubeconfig", s.Kubeconfig, true) },
	)
}
