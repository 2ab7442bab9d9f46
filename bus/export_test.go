package bus

// DisableJetStream turns JetStream off as nats-server does itself when its
// store fails under it (a write refused by the file system).
func DisableJetStream(s *Server) error { return s.ns.DisableJetStream() }
