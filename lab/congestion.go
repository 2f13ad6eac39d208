package lab

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"ilnp/lab/cc"
)

// CongestionRecord is rep-N/cc.json when a run used one of lab/cc's BPF congestion controls:
// the program's counters at the end of the run (every socket that chose it, the CN's sender
// and the MN's iperf3 server) and the replay of its first traced steps through lab/cc/model.
type CongestionRecord struct {
	Congestion string            `json:"congestion"`
	Counters   map[string]uint64 `json:"counters"`
	Replay     cc.Replay         `json:"replay"`
	Error      string            `json:"error,omitempty"`
}

// congestion is the run's TCP congestion control: --congestion, else the traffic's own.
func (c *RunConfig) congestion() string {
	if Traffics[c.Traffic].UDP {
		return ""
	}
	if c.Congestion != "" {
		return c.Congestion
	}
	return Traffics[c.Traffic].Congestion
}

func (c *RunConfig) validCongestion() error {
	if c.Congestion == "" {
		return nil
	}
	if Traffics[c.Traffic].UDP {
		return fmt.Errorf("--congestion applies to TCP traffic, not %s", c.Traffic)
	}
	return cc.Valid(c.Congestion)
}

// startCongestion registers the run's BPF congestion control when it is one (kernel-wide, so
// the CN's iperf3 finds it by name in its namespace); stop unloads it and writes dir/cc.json.
// The kernel's own algorithms need nothing.
func startCongestion(name, dir string) (stop func() error, err error) {
	if !cc.IsBPF(name) {
		return func() error { return nil }, nil
	}
	l, err := cc.Load(name, "")
	if err != nil {
		return nil, err
	}
	return func() error {
		rec := CongestionRecord{Congestion: name}
		var rerr error
		if c, err := l.Counters(); err == nil {
			rec.Counters = c.Map()
		} else {
			rerr = err
		}
		if steps, err := l.Trace(); err == nil {
			rec.Replay, rerr = cc.ReplayTrace(name, steps)
		} else {
			rerr = errors.Join(rerr, err)
		}
		if rerr != nil {
			rec.Error = rerr.Error()
		}
		writeJSON(filepath.Join(dir, "cc.json"), rec)
		return l.Close()
	}, nil
}

// congestionNote says where a congestion control comes from, for reports.
func congestionNote(name string) string {
	if cc.IsBPF(name) {
		return " (BPF struct_ops from lab/cc, loaded for the run; counters and model replay in rep-N/cc.json)"
	}
	return " (the kernel's)"
}

// congestionList renders --congestions for messages.
func congestionList() string { return strings.Join(cc.Names, ", ") }
