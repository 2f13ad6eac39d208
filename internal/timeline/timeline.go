// Package timeline is the event record that ilnpd (and the lab's baselines) write: one JSON
// object per line, stamped with CLOCK_MONOTONIC nanoseconds. Network namespaces share the
// monotonic clock, so events from the MN and the CN in the lab are on one time axis and a
// handoff delay is a subtraction.
package timeline

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Kind names an event. The names are a contract with the lab and `ilnpctl events -j`.
type Kind string

const (
	RASeen           Kind = "ra_seen"
	LocatorAdded     Kind = "locator_added"
	LocatorRemoved   Kind = "locator_removed"
	LocatorState     Kind = "locator_state"
	ActiveLocator    Kind = "active_locator"
	LUSent           Kind = "lu_sent"
	LUAckReceived    Kind = "lu_ack_received"
	LUGaveUp         Kind = "lu_gave_up"
	LUReceived       Kind = "lu_received"
	LUAckSent        Kind = "lu_ack_sent"
	SessionNew       Kind = "session_new"
	SessionExpired   Kind = "session_expired"
	PeerAdded        Kind = "peer_added"
	BadNonce         Kind = "bad_nonce"
	ParameterProblem Kind = "parameter_problem"
	// A host route clamped a session view's MTU below 1280 bytes (internal/pmtu).
	PathMTUClamp Kind = "pmtu_clamp"
	HandoffMode  Kind = "handoff_mode"
	// A packet the datapath dropped for a reason other than its nonce (a local locator that
	// is no longer usable, e.g. after a hard handoff), stamped by the kernel.
	DatapathDrop Kind = "datapath_drop"
	// Mobile IPv6 baseline (same axis, same file format).
	BUSent          Kind = "bu_sent"
	BAckReceived    Kind = "back_received"
	RRMessage       Kind = "rr_message"
	DNSUpdateSent   Kind = "dns_update_sent"
	DNSUpdateResult Kind = "dns_update_result"
)

// Event is one line of the timeline. Fields that do not apply are omitted.
type Event struct {
	MonoNS   int64  `json:"t_ns"`
	Kind     Kind   `json:"type"`
	Node     string `json:"node,omitempty"`
	Iface    string `json:"iface,omitempty"`
	Locator  string `json:"locator,omitempty"`
	Peer     string `json:"peer,omitempty"`
	Attempt  int    `json:"attempt,omitempty"`
	Seq      uint32 `json:"seq,omitempty"`
	Detail   string `json:"detail,omitempty"`
	Duration int64  `json:"duration_ns,omitempty"`
	// Late: how much of Duration the host added by running the daemon's work late (a path
	// verdict: its polls behind the times the tracker wanted them).
	Late int64 `json:"late_ns,omitempty"`
}

// Now is CLOCK_MONOTONIC in nanoseconds (Go's time.Now carries a monotonic reading but does
// not expose it as an absolute value comparable across processes).
func Now() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return time.Now().UnixNano()
	}
	return ts.Nano()
}

// Writer appends events as JSON lines; safe for concurrent use.
type Writer struct {
	mu  sync.Mutex
	out *bufio.Writer
	sub []chan Event
	// held: Hold was called and Release not yet; lines wait in out until then.
	held bool
}

// Hold makes Emit buffer its lines until Release: a daemon handling one input that causes
// several events (an LU: received, the locator change, the ACK sent) writes them with one
// system call instead of one each (issue 28: three writes per LU in a mass move of 10,000 LUs
// a second). Events emitted while held, from any goroutine, are written by Release.
func (w *Writer) Hold() {
	w.mu.Lock()
	w.held = true
	w.mu.Unlock()
}

// Release ends Hold and writes what was held.
func (w *Writer) Release() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.held = false
	if w.out != nil {
		_ = w.out.Flush()
	}
}

// NewWriter writes to out (nil: events only go to subscribers).
func NewWriter(out io.Writer) *Writer {
	w := &Writer{}
	if out != nil {
		w.out = bufio.NewWriter(out)
	}
	return w
}

// Emit stamps the event (unless already stamped), writes and flushes it (unless held), and
// hands it to subscribers that keep up; a slow subscriber misses events rather than stalling
// the daemon.
func (w *Writer) Emit(e Event) {
	if e.MonoNS == 0 {
		e.MonoNS = Now()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.out != nil {
		line, _ := json.Marshal(e)
		_, _ = w.out.Write(append(line, '\n'))
		if !w.held {
			_ = w.out.Flush()
		}
	}
	for _, ch := range w.sub {
		select {
		case ch <- e:
		default:
		}
	}
}

// Subscribe returns a channel of future events and a function that ends the subscription.
func (w *Writer) Subscribe(buffer int) (<-chan Event, func()) {
	ch := make(chan Event, buffer)
	w.mu.Lock()
	w.sub = append(w.sub, ch)
	w.mu.Unlock()
	return ch, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		for i, c := range w.sub {
			if c == ch {
				w.sub = append(w.sub[:i], w.sub[i+1:]...)
				close(ch)
				return
			}
		}
	}
}

// Read parses a timeline; a malformed line is an error naming its line number.
func Read(r io.Reader) ([]Event, error) {
	var events []Event
	scanner := bufio.NewScanner(r)
	scanner.Buffer(make([]byte, 64*1024), 1<<20)
	for line := 1; scanner.Scan(); line++ {
		if len(scanner.Bytes()) == 0 {
			continue
		}
		var e Event
		if err := json.Unmarshal(scanner.Bytes(), &e); err != nil {
			return events, fmt.Errorf("timeline line %d: %w", line, err)
		}
		events = append(events, e)
	}
	return events, scanner.Err()
}
