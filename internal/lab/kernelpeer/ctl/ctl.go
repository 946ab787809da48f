// Package ctl is the control protocol between kernelpeer and its guest
// agent.
//
// It is the control protocol between kernelpeer and its agent in the guest:
// one JSON request per line on the virtio-serial port PortName, one JSON
// response per line back. Both sides use these types, so they cannot drift
// apart.
package ctl

// PortName is the name the host gives the control port (virtserialport name=).
const PortName = "org.espgw.ctl"

// Request asks the agent to run Argv (no shell) for at most TimeoutMS.
type Request struct {
	ID        uint64   `json:"id"`
	Argv      []string `json:"argv"`
	TimeoutMS int64    `json:"timeout_ms"`
}

// Response is what the command did.
type Response struct {
	ID     uint64 `json:"id"`
	Exit   int    `json:"exit"`
	Output []byte `json:"output"`
	Error  string `json:"error,omitempty"` // the command could not run or timed out
}
