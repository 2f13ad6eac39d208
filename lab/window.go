package lab

import (
	"ilnp/lab/cwnd"
	"ilnp/lab/window"
)

// ClampWindow holds every iperf3 the testbed starts from now on to a TCP window of bytes
// (lab/window: a sock_ops cwnd clamp in a cgroup of this testbed's own, because `iperf3 -w`
// gives a larger window on this kernel). Close removes it.
func (t *Topology) ClampWindow(bytes int) error {
	if t.window != nil {
		return nil
	}
	c, err := window.Start("ilnp-lab-"+t.ID, bytes)
	if err != nil {
		return err
	}
	t.window = c
	return nil
}

// WindowReport is rep-N/window.json of a TCP run: the clamp and what the sender's socket
// showed (sock_diag, what `ss -ti` prints) while the flow ran.
type WindowReport struct {
	Bytes    int             `json:"window_bytes"` // the clamp (0: none)
	Counters window.Counters `json:"counters"`
	// Over the cwnd samples (every 20 ms): the largest congestion window and data in flight
	// (segments and bytes), the largest window the receiver advertised, the sender's MSS.
	MaxCwnd          uint32 `json:"max_cwnd"`
	MaxUnacked       uint32 `json:"max_unacked"`
	MaxInFlightBytes uint64 `json:"max_in_flight_bytes"`
	MaxSndWnd        uint32 `json:"max_snd_wnd"`
	MSS              uint32 `json:"mss"`
	Samples          int    `json:"samples"`
	Error            string `json:"error,omitempty"`
}

// windowReport summarises the clamp and the sender's samples.
func (t *Topology) windowReport(samples []cwnd.Sample) WindowReport {
	r := WindowSamples(samples)
	if t.window != nil {
		r.Bytes = t.window.Bytes
		var err error
		if r.Counters, err = t.window.Counters(); err != nil {
			r.Error = err.Error()
		}
	}
	return r
}

// WindowSamples is the sample half of a WindowReport.
func WindowSamples(samples []cwnd.Sample) WindowReport {
	var r WindowReport
	r.Samples = len(samples)
	for _, s := range samples {
		r.MaxCwnd = max(r.MaxCwnd, s.Cwnd)
		r.MaxUnacked = max(r.MaxUnacked, s.Unacked)
		r.MaxInFlightBytes = max(r.MaxInFlightBytes, uint64(s.Unacked)*uint64(s.SndMSS))
		r.MaxSndWnd = max(r.MaxSndWnd, s.SndWnd)
		if s.SndMSS != 0 {
			r.MSS = s.SndMSS
		}
	}
	return r
}
