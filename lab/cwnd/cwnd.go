// Package cwnd samples a TCP sender's congestion window during a lab run (issue 15: cwnd over
// time at the sender, tcp-aware on and off overlaid, like TCP-M6's figs. 12-14). It asks the
// kernel through sock_diag (INET_DIAG_INFO, what `ss -ti` prints) in the sender's network
// namespace every few milliseconds; the data connection is the socket to or from the iperf3
// port that has had the most bytes acknowledged (iperf3's control connection shares the port).
package cwnd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"ilnp/internal/timeline"
)

// Sample is the data connection's state at one instant.
type Sample struct {
	MonoNS       int64  `json:"mono_ns"` // CLOCK_MONOTONIC, as the run's timelines
	Cwnd         uint32 `json:"cwnd"`    // segments
	Ssthresh     uint32 `json:"ssthresh"`
	CaState      uint8  `json:"ca_state"` // 0 Open, 1 Disorder, 2 CWR, 3 Recovery, 4 Loss
	Unacked      uint32 `json:"unacked"`
	Lost         uint32 `json:"lost"`
	TotalRetrans uint32 `json:"total_retrans"`
	BytesAcked   uint64 `json:"bytes_acked"`
	// SndMSS and SndWnd: the sender's MSS and the window the receiver advertised (bytes):
	// Unacked * SndMSS is the data in flight (lab/window's clamp bounds it).
	SndMSS uint32 `json:"snd_mss,omitempty"`
	SndWnd uint32 `json:"snd_wnd,omitempty"`
	// RTOus is the sender's retransmission timeout (tcpi_rto, µs): seed 004's fig. 13.
	RTOus uint32 `json:"rto_us,omitempty"`
}

// Conn is one socket of a sock_diag dump, as pick sees it.
type Conn struct {
	SrcPort, DstPort uint16
	Info             *netlink.TCPInfo
}

// Pick returns the data connection's sample among conns: the socket with port as either end
// that has had the most bytes acknowledged. False when there is none (the flow has not
// started or has ended).
func Pick(conns []Conn, port uint16, mono int64) (Sample, bool) {
	var best *netlink.TCPInfo
	for _, c := range conns {
		if c.Info == nil || (c.SrcPort != port && c.DstPort != port) {
			continue
		}
		if best == nil || c.Info.Bytes_acked > best.Bytes_acked {
			best = c.Info
		}
	}
	if best == nil {
		return Sample{}, false
	}
	return Sample{MonoNS: mono, Cwnd: best.Snd_cwnd, Ssthresh: best.Snd_ssthresh, CaState: best.Ca_state,
		Unacked: best.Unacked, Lost: best.Lost, TotalRetrans: best.Total_retrans, BytesAcked: best.Bytes_acked,
		SndMSS: best.Snd_mss, SndWnd: best.Snd_wnd, RTOus: best.Rto}, true
}

// Sampler samples one namespace's data connection until stopped.
type Sampler struct {
	h       *netlink.Handle
	cancel  context.CancelFunc
	done    chan struct{}
	mu      sync.Mutex
	samples []Sample
	errs    int
	lastErr error
}

// Start opens a sock_diag socket inside the sender's namespace (enter runs its function there,
// e.g. netns.NS.Do) and samples the connection of port every interval until Stop or ctx ends.
func Start(ctx context.Context, enter func(func() error) error, port uint16, every time.Duration) (*Sampler, error) {
	s := &Sampler{done: make(chan struct{})}
	if err := enter(func() (err error) {
		s.h, err = netlink.NewHandle(unix.NETLINK_INET_DIAG)
		return err
	}); err != nil {
		return nil, fmt.Errorf("cwnd: sock_diag socket: %w", err)
	}
	ctx, s.cancel = context.WithCancel(ctx)
	go s.loop(ctx, port, every)
	return s, nil
}

func (s *Sampler) loop(ctx context.Context, port uint16, every time.Duration) {
	defer close(s.done)
	defer s.h.Close()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		resp, err := s.h.SocketDiagTCPInfo(unix.AF_INET6)
		mono := timeline.Now()
		if errors.Is(err, netlink.ErrDumpInterrupted) {
			err = nil // sockets came or went during the dump; the data connection is in it
		}
		s.mu.Lock()
		if err != nil {
			s.errs++
			s.lastErr = err
		} else {
			conns := make([]Conn, 0, len(resp))
			for _, r := range resp {
				if r.InetDiagMsg != nil {
					conns = append(conns, Conn{SrcPort: r.InetDiagMsg.ID.SourcePort, DstPort: r.InetDiagMsg.ID.DestinationPort, Info: r.TCPInfo})
				}
			}
			if smp, ok := Pick(conns, port, mono); ok {
				s.samples = append(s.samples, smp)
			}
		}
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Stop ends sampling and returns the samples and, when some dumps failed, why (the samples
// are still usable). Safe to call more than once.
func (s *Sampler) Stop() ([]Sample, error) {
	s.cancel()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	if s.errs > 0 {
		err = fmt.Errorf("cwnd: %d sock_diag dumps failed, last: %w", s.errs, s.lastErr)
	}
	return s.samples, err
}
