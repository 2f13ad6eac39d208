package node

import (
	"fmt"
	"time"

	"ilnp/internal/datapath"
	"ilnp/internal/encap"
	"ilnp/internal/ilcc"
	"ilnp/internal/paths"
	"ilnp/internal/tcpaware"
	"ilnp/internal/timeline"
	"ilnp/internal/wire"
)

// The correspondent's side of a soft switch (tcpaware.RemotePins): when a correspondent's LU moves
// its active locator while the old one still works, this node keeps sending to the old one
// (datapath.SetSessionsRemote) and probes the new pair; the answer's RTT decides whether the
// TCP sockets drain before the packets move. Loop-owned, like the rest of tcpAware.

// tcpRemotePin keeps b's packets on old, the locator the correspondent just moved away
// from. It returns false (the caller drains as before) when reactions are off, there is no
// path monitor to probe with, the old path has not delivered in the last
// tcpaware.RemotePinFreshRx (a failover, not a soft switch), or the datapath cannot pin.
func (n *Node) tcpRemotePin(b ilcc.Binding, old wire.L64) bool {
	t := n.tcp()
	m := n.pathmon.Load()
	active, ok := n.cache.Active()
	// One family for the three locators: the probe needs a pair of one family (an IPv4
	// locator is reached inside UDP/IPv4, an IPv6 one natively), and a switch across families
	// is no race between two paths of one kind.
	v4 := encap.IsL32(active.Locator)
	if !t.policy.Enabled() || m == nil || !ok || encap.IsL32(b.RemoteLocator) != v4 || encap.IsL32(old) != v4 ||
		m.down[healthKey{peer: b.Peer, loc: old}] {
		return false
	}
	if !n.deliveredRecently(b.Peer, old, tcpaware.RemotePinFreshRx) {
		n.count("tcpaware_remote_pins_not_fresh")
		return false
	}
	now := time.Now()
	if !t.rpins.Pin(b.Peer, old, b.RemoteLocator, active.Locator, now) {
		return false
	}
	if _, err := n.dp.SetSessionsRemote(b.Peer, old); err != nil {
		t.rpins.Release(b.Peer)
		n.count("tcpaware_errors")
		n.log.Warn("mobility-aware TCP: correspondent's soft switch not pinned", "peer", b.Peer, "err", err)
		return false
	}
	// The probe leaves once the datapath knows the new locator (tcpRemotePinProbes, after apply).
	t.rpinProbes = append(t.rpinProbes, b.Peer)
	n.count("tcpaware_remote_pins")
	n.emit(timeline.Event{Kind: tcpAwareEvent, Peer: b.Peer.String(), Locator: old.String(),
		Detail: fmt.Sprintf("remote pin on %v, probing %v->%v", old, active.Locator, b.RemoteLocator)})
	return true
}

// deliveredRecently: a packet of peer arrived on a pair from its locator loc within d. It
// reads peer's sessions and their pairs from loc, not every pair (a soft switch at a server
// with 100,000 sessions read the whole table: issue 28).
func (n *Node) deliveredRecently(peer wire.NID, loc wire.L64, d time.Duration) bool {
	locals := make([]wire.L64, 0, len(n.locals))
	for l := range n.locals {
		locals = append(locals, l)
	}
	now := datapath.MonotonicCoarseNow()
	for _, local := range n.localNIDsFor(peer) {
		last, err := n.dp.LastRxFrom(local, peer, loc, locals)
		if err != nil {
			n.log.Debug("path counters", "peer", peer, "err", err)
			continue
		}
		if last != 0 && int64(now)-int64(last) < d.Nanoseconds() {
			return true
		}
	}
	return false
}

// tcpRemotePinProbes sends the probes of the pins taken in this apply, now that the datapath
// lists their new locators (a probe of a pair it does not know would leave on another).
func (n *Node) tcpRemotePinProbes() {
	t := n.tcpa
	if t == nil || len(t.rpinProbes) == 0 {
		return
	}
	m := n.pathmon.Load()
	now := time.Now()
	for _, peer := range t.rpinProbes {
		local, remote, ok := t.rpins.Probed(peer)
		b, okb := n.cache.Binding(peer)
		if !ok || !okb || m == nil {
			continue
		}
		n.sendProbe(m, b, paths.Key{Peer: peer, Local: local, Remote: remote}, now)
	}
	t.rpinProbes = t.rpinProbes[:0]
}

// tcpRemotePinAnswered: a probe of k came back after rtt. When it is a remote pin's, the
// sockets drain if the new path is the faster, and the packets move.
func (n *Node) tcpRemotePinAnswered(k paths.Key, rtt time.Duration) {
	if n.tcpa == nil || !n.tcpa.rpins.Answered(k.Peer, k.Local, k.Remote) {
		return
	}
	n.tcpReleaseRemotePin(k.Peer, "answered", rtt, true)
}

// tcpRemotePinsObserve runs at each path poll: a remote pin ends when the correspondent's
// packets come over the new locator (it pins nothing itself) or at tcpaware.MaxRemotePin.
// statsOf is a peer's pair counters (a pass over every pair per pin held the poll's first
// step for pins x pairs: issue 28).
func (n *Node) tcpRemotePinsObserve(statsOf func(wire.NID) []datapath.PathStats, now time.Time) {
	t := n.tcpa
	if t == nil {
		return
	}
	for _, peer := range t.rpins.Peers() {
		_, newLoc, _ := t.rpins.Pinned(peer)
		var rx uint64
		for _, st := range statsOf(peer) {
			if st.Key.Remote == newLoc {
				rx += st.RxPackets
			}
		}
		if t.rpins.Observe(peer, rx) {
			n.tcpReleaseRemotePin(peer, "peer sends on the new path", 0, false)
		}
	}
	for peer, age := range t.rpins.Due(now) {
		n.tcpReleaseRemotePin(peer, "unanswered", age, true)
	}
}

// tcpReleaseRemotePin moves peer's packets to its active locator. measured: rtt is the new
// path's RTT (or a lower bound), and the sockets drain only if it is below their srtt by 1/8;
// otherwise they drain unless their ACKs already show the new path slower, as without a pin.
func (n *Node) tcpReleaseRemotePin(peer wire.NID, why string, rtt time.Duration, measured bool) {
	t := n.tcp()
	if b, ok := n.cache.Binding(peer); ok {
		var u tcpaware.Update
		var ok bool
		if measured {
			u, ok = t.policy.RemotePinAnswered(b.SessionRemote.Addr(), rtt)
		} else {
			u, ok = t.policy.Switching(b.SessionRemote.Addr(), true)
		}
		if ok {
			n.tcpApply([]tcpaware.Update{u})
		}
	}
	n.tcpRemoteUnpin(peer)
	detail := "remote pin released: " + why
	if rtt > 0 {
		detail += fmt.Sprintf(" rtt=%s", rtt.Round(10*time.Microsecond))
	}
	n.emit(timeline.Event{Kind: tcpAwareEvent, Peer: peer.String(), Detail: detail})
}

// tcpRemoteUnpin sends peer's packets to its active remote locator again.
func (n *Node) tcpRemoteUnpin(peer wire.NID) {
	if _, err := n.dp.SetSessionsRemote(peer, 0); err != nil {
		n.count("tcpaware_errors")
		n.log.Warn("mobility-aware TCP: correspondent's soft switch not released", "peer", peer, "err", err)
	}
}

// tcpStaleRemotePins ends the remote pins whose locator stopped being usable or whose
// correspondent moved on to yet another locator: nothing to measure, nothing to drain.
func (n *Node) tcpStaleRemotePins() {
	t := n.tcp()
	active := func(peer wire.NID) wire.L64 {
		b, _ := n.cache.Binding(peer)
		return b.RemoteLocator
	}
	m := n.pathmon.Load()
	usable := func(peer wire.NID, loc wire.L64) bool {
		b, ok := n.cache.Binding(peer)
		return ok && b.RemoteUsable(loc) && (m == nil || !m.down[healthKey{peer: peer, loc: loc}])
	}
	for _, peer := range t.rpins.Stale(active, usable) {
		n.tcpRemoteUnpin(peer)
		n.emit(timeline.Event{Kind: tcpAwareEvent, Peer: peer.String(), Detail: "remote pin released: locator gone"})
	}
}
