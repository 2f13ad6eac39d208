// Package tcpaware tells the TCP sockets of one correspondent that it is moving or has moved
// (issue 15, TCP-M6's mobility-aware TCP without a kernel patch). The daemon writes what it
// wants done per correspondent into a BPF map keyed by the correspondent's session-view
// address (what the sockets see) and runs a BPF TCP iterator (bpf/tcpaware.c) at once: the
// iterator applies the entry to every TCP socket of that address with bpf_setsockopt and
// reports the sockets' state, from which Loaded.Revert sends the kernel's own RFC 6069
// signal to re-arm a backed-off retransmission timer. The iterator sees the TCP sockets of the
// network namespace of the thread that runs it.
package tcpaware

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Peer is what the next iterator run does to every socket of one correspondent (zero: leave
// that setting alone).
type Peer = tcpawareBPFTcpawarePeer

// Counter indices (enum tcpaware_counter in bpf/lib/maps.h).
const (
	CounterSocketsSeen = iota
	CounterSocketsMatched
	CounterRTOMaxSet
	CounterSetsockoptErrors
	CounterNotTCPSock
	CounterCCSwitched
	CounterNotCubic
	CounterSsthreshKept
	CounterCwndRestored
	CounterWrapperInit
	CounterHolds
	CounterHoldAborted
	CounterDrains
	CounterDrainNotFaster
	CounterDrainExpired
	CounterDrainSkipped
	numCounters
)

// CounterNames name the counters for ilnpctl and JSON.
var CounterNames = [numCounters]string{"tcpaware_sockets_seen", "tcpaware_sockets_matched",
	"tcpaware_rto_max_set", "tcpaware_setsockopt_errors", "tcpaware_not_tcp_sock",
	"tcpaware_cc_switched", "tcpaware_not_cubic", "tcpaware_ssthresh_kept", "tcpaware_cwnd_restored", "tcpaware_wrapper_init",
	"tcpaware_holds", "tcpaware_hold_aborted", "tcpaware_drains", "tcpaware_drain_not_faster", "tcpaware_drain_expired", "tcpaware_drain_skipped"}

// Applied/failed bits in Socket.
const (
	AppliedRTOMax  = 1 << 0
	AppliedWrapper = 1 << 2 // the socket was moved from cubic to the wrapper
	AppliedWindow  = 1 << 3 // its loss window was opened
	AppliedDrain   = 1 << 4 // new data waits for the old path's to arrive (a soft switch)
)

// Socket is one matched socket as the iterator saw it (struct tcpaware_sock), after any
// setting the run applied.
type Socket struct {
	Local, Remote netip.AddrPort
	Epoch         uint32
	SndUna        uint32
	SndNxt        uint32
	SRTT8us       uint32 // srtt in 1/8 us, as the kernel keeps it
	RTOJiffies    uint32
	Cwnd          uint32
	Ssthresh      uint32
	PacketsOut    uint32
	LostOut       uint32
	RetransOut    uint32
	Backoff       uint8
	State         uint8 // TCP_ESTABLISHED = 1, ...
	Applied       uint8
	Failed        uint8
}

// sockRecordSize is sizeof(struct tcpaware_sock).
const sockRecordSize = 16 + 16 + 2 + 2 + 10*4 + 4

// ParseSockets decodes the iterator's output. A short or trailing record is an error: the
// output comes from our program, so a mismatch means the object and this code disagree.
func ParseSockets(b []byte) ([]Socket, error) {
	if len(b)%sockRecordSize != 0 {
		return nil, fmt.Errorf("iterator output of %d bytes is not a multiple of the %d-byte record", len(b), sockRecordSize)
	}
	out := make([]Socket, 0, len(b)/sockRecordSize)
	for off := 0; off < len(b); off += sockRecordSize {
		r := b[off : off+sockRecordSize]
		saddr := netip.AddrFrom16([16]byte(r[0:16]))
		daddr := netip.AddrFrom16([16]byte(r[16:32]))
		le := binary.LittleEndian
		u := func(i int) uint32 { return le.Uint32(r[36+4*i:]) }
		out = append(out, Socket{
			Local:  netip.AddrPortFrom(saddr, le.Uint16(r[32:])),
			Remote: netip.AddrPortFrom(daddr, le.Uint16(r[34:])),
			Epoch:  u(0), SndUna: u(1), SndNxt: u(2), SRTT8us: u(3), RTOJiffies: u(4),
			Cwnd: u(5), Ssthresh: u(6), PacketsOut: u(7), LostOut: u(8), RetransOut: u(9),
			Backoff: r[76], State: r[77], Applied: r[78], Failed: r[79],
		})
	}
	return out, nil
}

// Loaded is the loaded iterator and its maps.
type Loaded struct {
	objs struct {
		Iter     *ebpf.Program `ebpf:"tcpaware_iter"`
		Peers    *ebpf.Map     `ebpf:"tcpaware_peers"`
		Counters *ebpf.Map     `ebpf:"tcpaware_counters"`
		CCName   *ebpf.Map     `ebpf:"tcpaware_ccname"`
		Socks    *ebpf.Map     `ebpf:"tcpaware_sks"`
	}
	link *link.Iter
	cc   *wrapper // nil: no cubic wrapper (CwndErr says why)
	// CwndErr is why the cubic wrapper (the loss-window reactions) is not available.
	CwndErr error
}

// Load loads the iterator (only its own maps; the datapath maps the header also declares are
// not created).
func Load() (*Loaded, error) {
	spec, err := loadTcpawareBPF()
	if err != nil {
		return nil, fmt.Errorf("tcpaware: %w", err)
	}
	l := &Loaded{}
	if err := spec.LoadAndAssign(&l.objs, nil); err != nil {
		return nil, fmt.Errorf("tcpaware: load: %w", err)
	}
	it, err := link.AttachIter(link.IterOptions{Program: l.objs.Iter})
	if err != nil {
		l.closeObjs()
		return nil, fmt.Errorf("tcpaware: attach TCP iterator: %w", err)
	}
	l.link = it
	l.cc, l.CwndErr = loadWrapper(spec, l.objs.Counters, l.objs.Socks)
	if l.CwndErr == nil {
		if err := l.objs.CCName.Put(uint32(0), ccName(l.cc.name)); err != nil {
			l.CwndErr = errors.Join(fmt.Errorf("tcpaware: wrapper name: %w", err), l.cc.close())
			l.cc = nil
		}
	}
	return l, nil
}

// WrapperName is the registered name of the cubic wrapper ("" when unavailable).
func (l *Loaded) WrapperName() string {
	if l.cc == nil {
		return ""
	}
	return l.cc.name
}

func (l *Loaded) closeObjs() {
	for _, c := range []io.Closer{l.objs.Iter, l.objs.Peers, l.objs.Counters, l.objs.CCName, l.objs.Socks} {
		if c != nil {
			c.Close()
		}
	}
}

// Close frees the iterator and its maps. Settings already applied to sockets stay.
func (l *Loaded) Close() error {
	if l == nil {
		return nil
	}
	var err error
	if l.link != nil {
		err = l.link.Close()
		l.link = nil
	}
	if l.cc != nil {
		err = errors.Join(err, l.cc.close())
		l.cc = nil
	}
	l.closeObjs()
	return err
}

func key(addr netip.Addr) (tcpawareBPFTcpawareAddr, error) {
	if !addr.Is6() || addr.Is4In6() {
		return tcpawareBPFTcpawareAddr{}, fmt.Errorf("tcpaware: %s is not an IPv6 address", addr)
	}
	return tcpawareBPFTcpawareAddr{A: addr.As16()}, nil
}

// SetPeer writes what the next run does to the sockets of the correspondent seen as addr.
func (l *Loaded) SetPeer(addr netip.Addr, p Peer) error {
	k, err := key(addr)
	if err != nil {
		return err
	}
	if err := l.objs.Peers.Put(k, p); err != nil {
		return fmt.Errorf("tcpaware: peer %s: %w", addr, err)
	}
	return nil
}

// DeletePeer forgets a correspondent (its sockets are no longer matched).
func (l *Loaded) DeletePeer(addr netip.Addr) error {
	k, err := key(addr)
	if err != nil {
		return err
	}
	if err := l.objs.Peers.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("tcpaware: delete peer %s: %w", addr, err)
	}
	return nil
}

// Run runs the iterator once over the TCP sockets of the calling thread's network namespace
// and returns the matched ones.
func (l *Loaded) Run() ([]Socket, error) {
	rc, err := l.link.Open()
	if err != nil {
		return nil, fmt.Errorf("tcpaware: open iterator: %w", err)
	}
	defer rc.Close()
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, rc); err != nil {
		return nil, fmt.Errorf("tcpaware: read iterator: %w", err)
	}
	return ParseSockets(buf.Bytes())
}

// Counters reads the iterator's counters by name.
func (l *Loaded) Counters() (map[string]uint64, error) {
	m := make(map[string]uint64, numCounters)
	for i, name := range CounterNames {
		var v uint64
		if err := l.objs.Counters.Lookup(uint32(i), &v); err != nil {
			return nil, fmt.Errorf("tcpaware: counter %s: %w", name, err)
		}
		m[name] = v
	}
	return m, nil
}
