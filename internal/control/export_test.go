package control

// Path is where the socket is.
func (s *Server) Path() string { return s.path }
