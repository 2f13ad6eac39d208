package tcpaware

import (
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// Kernel values the policy restores or respects.
const (
	// RTOCapMs is TCP_RTO_MAX_MS while a correspondent moves: the smallest the kernel accepts,
	// so a socket backing off across the disconnection probes the path at least once a second.
	RTOCapMs = 1000
	// DefaultRTOMaxMs is net.ipv4.tcp_rto_max_ms's default (TCP_RTO_MAX), restored after a move.
	DefaultRTOMaxMs = 120000
	// The loss window: while a correspondent moves (moveWindowMs, renewed at the end) and for
	// a while after its end (windowRTTs new-path RTTs, at least minWindowMs; windowUnknownMs
	// without an RTT), a loss on its cubic sockets is the move's, not congestion.
	moveWindowMs    = 5000
	minWindowMs     = 1000
	maxWindowMs     = 5000
	windowUnknownMs = 2000
	windowRTTs      = 10
)

func lossWindowMs(rtt time.Duration) uint32 {
	if rtt <= 0 {
		return windowUnknownMs
	}
	return uint32(min(max(windowRTTs*rtt.Milliseconds(), minWindowMs), maxWindowMs))
}

// maxRTT bounds the LU exchange's RTT handed to the sockets (a larger one is no estimate).
const maxRTT = 10 * time.Second

// rttUs is the new path's RTT for the cubic wrapper's hold (0: unknown).
func rttUs(rtt time.Duration) uint32 {
	if rtt <= 0 || rtt > maxRTT {
		return 0
	}
	return uint32(max(rtt.Microseconds(), 1))
}

// Policy decides, per correspondent, what the iterator applies to its TCP sockets when a move
// starts and ends. It is pure: the node's loop owns it and carries out its results.
type Policy struct {
	enabled bool
	peers   map[netip.Addr]*peerState
}

type peerState struct {
	epoch  uint32
	moving bool
	drains uint32 // soft switches signalled (the drain number: the iterator applies each once)
}

// Update is one entry to write and whether the sockets' retransmission timers are to be
// reverted after the run (RFC 6069).
type Update struct {
	Peer   netip.Addr
	Entry  Peer
	Revert bool
}

// NewPolicy returns a policy, switched on or off.
func NewPolicy(enabled bool) *Policy {
	return &Policy{enabled: enabled, peers: map[netip.Addr]*peerState{}}
}

// Enabled says whether reactions are on.
func (p *Policy) Enabled() bool { return p.enabled }

// SetEnabled switches the reactions; switching off returns the updates that undo what is
// still applied (moving correspondents' RTO caps).
func (p *Policy) SetEnabled(on bool) []Update {
	if on == p.enabled {
		return nil
	}
	p.enabled = on
	if on {
		return nil
	}
	var out []Update
	for addr, s := range p.peers {
		if s.moving {
			out = append(out, Update{Peer: addr, Entry: Peer{Epoch: s.epoch, RtoMaxMs: DefaultRTOMaxMs}})
		}
	}
	clear(p.peers)
	return out
}

func (p *Policy) state(peer netip.Addr) *peerState {
	s := p.peers[peer]
	if s == nil {
		s = &peerState{}
		p.peers[peer] = s
	}
	return s
}

// MoveStarted: the path to peer broke (the MN's active locator died or changed). Its sockets'
// RTO is capped so that backoff does not grow across the disconnection, and its cubic sockets
// get a loss window.
func (p *Policy) MoveStarted(peer netip.Addr) (Update, bool) {
	if !p.enabled || !peer.IsValid() {
		return Update{}, false
	}
	s := p.state(peer)
	if s.moving {
		return Update{}, false
	}
	s.epoch++
	s.moving = true
	return Update{Peer: peer, Entry: Peer{Epoch: s.epoch, Moving: 1, RtoMaxMs: RTOCapMs, LossWindowMs: moveWindowMs}}, true
}

// MoveEnded: the path to peer works again (LU-ACK on the MN with the exchange's RTT, LU applied
// on the CN with rtt 0). The RTO cap is lifted, the timers are reverted, and a loss window
// opens for 10 new-path RTTs (1-5 s; 2 s without an RTT); the RTT also scales the window the
// move's fast recovery holds (bpf/tcpaware.c).
func (p *Policy) MoveEnded(peer netip.Addr, rtt time.Duration) (Update, bool) {
	if !p.enabled || !peer.IsValid() {
		return Update{}, false
	}
	s := p.state(peer)
	if !s.moving {
		s.epoch++ // the CN learns of a move only at its end
	}
	s.moving = false
	e := Peer{Epoch: s.epoch, RtoMaxMs: DefaultRTOMaxMs, LossWindowMs: lossWindowMs(rtt), RttUs: rttUs(rtt)}
	return Update{Peer: peer, Entry: e, Revert: true}, true
}

// Switching: a soft switch (make-before-break: the old locator still works) is about to move
// peer's packets to another path, and the datapath has not yet switched. Its sockets' new
// data waits until what is in flight on the old path cannot be overtaken on the new one (the
// receiver would otherwise SACK the newer data first and the sender retransmit the older in
// vain); see bpf/tcpaware.c ta_start_drain. peerSwitched: the correspondent already sends
// over the new path (we are the CN applying its LU), so its ACKs show the new path's RTT;
// otherwise (the MN switching first) the drain waits for an ACK that shows it. Nothing else in
// the sockets' entry is set: the move's own start and end follow as before.
func (p *Policy) Switching(peer netip.Addr, peerSwitched bool) (Update, bool) {
	if !p.enabled || !peer.IsValid() {
		return Update{}, false
	}
	s := p.state(peer)
	s.drains++
	if s.drains == 0 { // wrapped: 0 means no drain
		s.drains = 1
	}
	e := Peer{Epoch: s.epoch, Drain: s.drains}
	if !peerSwitched {
		e.DrainWait = 1
	}
	return Update{Peer: peer, Entry: e}, true
}

// SoftMoveStarted: MoveStarted for a soft switch (the old locator still works): the same
// entry with a drain (Switching, the correspondent not yet switched), in one iterator run
// before the datapath switches.
func (p *Policy) SoftMoveStarted(peer netip.Addr) (Update, bool) {
	d, ok := p.Switching(peer, false)
	if !ok {
		return Update{}, false
	}
	if m, ok := p.MoveStarted(peer); ok {
		m.Entry.Drain, m.Entry.DrainWait = d.Entry.Drain, d.Entry.DrainWait
		return m, true
	}
	return d, true
}

// SwitchAnswered: the MN's soft switch to peer, held on the old path (Pins), got its LU-ACK
// over the new one. The move ends (MoveEnded) and, when the exchange gave an RTT, the same
// entry drains the sockets whose srtt is above it by more than 1/8 (the new path is the faster,
// and the correspondent, which switched on the LU, already sends over it): bpf/tcpaware.c
// skips the others. Without an RTT (the LU was retransmitted) nothing drains: the path is not
// known to be faster.
func (p *Policy) SwitchAnswered(peer netip.Addr, rtt time.Duration) (Update, bool) {
	u, ok := p.MoveEnded(peer, rtt)
	if !ok || u.Entry.RttUs == 0 {
		return u, ok
	}
	d, _ := p.Switching(peer, true)
	u.Entry.Drain = d.Entry.Drain
	return u, true
}

// RemotePinAnswered: the CN's pin of peer's packets on the old path (RemotePins) ends with the new
// path's RTT known (its probe's answer, or the hold's age when none came: a lower bound). The
// entry drains the sockets whose srtt is above that RTT by more than 1/8 (the new path is the
// faster: what follows there would overtake what is in flight); bpf/tcpaware.c skips the
// others, and the packets move at once. Only the drain is in the entry: the move's end was
// applied when the LU was.
func (p *Policy) RemotePinAnswered(peer netip.Addr, rtt time.Duration) (Update, bool) {
	u, ok := p.Switching(peer, true)
	if !ok {
		return u, false
	}
	u.Entry.RttUs = rttUs(rtt)
	return u, true
}

// Forget drops a correspondent whose session ended.
func (p *Policy) Forget(peer netip.Addr) { delete(p.peers, peer) }

// Describe summarises one update and the run that carried it out, for the event timeline.
func Describe(u Update, socks []Socket, reverts int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "peer=%s epoch=%d", u.Peer, u.Entry.Epoch)
	if u.Entry.Moving != 0 {
		b.WriteString(" moving")
	} else {
		b.WriteString(" settled")
	}
	if u.Entry.RtoMaxMs != 0 {
		fmt.Fprintf(&b, " rto_max=%dms", u.Entry.RtoMaxMs)
	}
	if u.Entry.LossWindowMs != 0 {
		fmt.Fprintf(&b, " loss_window=%dms", u.Entry.LossWindowMs)
	}
	if u.Entry.Drain != 0 {
		fmt.Fprintf(&b, " drain=%d", u.Entry.Drain)
		if u.Entry.DrainWait != 0 {
			b.WriteString(" (wait)")
		}
	}
	n := 0
	for _, s := range socks {
		if s.Remote.Addr() == u.Peer {
			n++
		}
	}
	fmt.Fprintf(&b, " sockets=%d", n)
	if u.Revert {
		fmt.Fprintf(&b, " reverts=%d", reverts)
	}
	return b.String()
}
