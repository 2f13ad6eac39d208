package node

import (
	"context"
	"maps"
	"net/netip"
	"sync/atomic"
	"time"

	"ilnp/internal/ilcc"
	"ilnp/internal/lu"
	"ilnp/internal/tcpaware"
	"ilnp/internal/timeline"
	"ilnp/internal/wire"
)

// tcpAwareEvent is the timeline event of one signal (what was applied to how many sockets).
const tcpAwareEvent timeline.Kind = "tcp_aware"

// tcpAware is the node's side of issue 15: it turns the ILCC's and the LU engine's view of a
// move into the per-correspondent signal internal/tcpaware delivers to TCP sockets. Loop-owned.
type tcpAware struct {
	policy     *tcpaware.Policy
	it         *tcpaware.Loaded // loaded when first on; nil while off or unavailable
	loadErr    error
	lastActive wire.L64
	// pins keep a correspondent's packets on the old locator during the MN's soft switch
	// until the LU-ACK (tcpaware.Pins).
	pins tcpaware.Pins
	// rpins keep the packets to a correspondent on its old locator during its soft switch
	// until a probe has measured the new path (tcpaware.RemotePins, remotepin.go); rpinProbes
	// are the pins whose probe leaves after this apply.
	rpins      tcpaware.RemotePins
	rpinProbes []wire.NID
	// deferred are updates that need not take hold before the datapath switches (a move's
	// start): they are applied at the end of Node.apply, after its LUs and LU-ACKs left, so
	// that the iterator's walk of the TCP table (milliseconds) does not delay the handoff.
	deferred []tcpaware.Update
	// live is it for ilnpctl show stats (read off the loop).
	live atomic.Pointer[tcpaware.Loaded]
}

// ensure loads the iterator and the cubic wrapper once reactions are on (ahead of the first
// move: loading takes tens of milliseconds). A failure is logged once and disables them.
func (n *Node) tcpEnsure() *tcpaware.Loaded {
	t := n.tcp()
	if t.it == nil && t.loadErr == nil && t.policy.Enabled() {
		t.it, t.loadErr = tcpaware.Load()
		if t.loadErr != nil {
			n.log.Warn("mobility-aware TCP unavailable", "err", t.loadErr)
		} else {
			if t.it.CwndErr != nil {
				n.log.Warn("mobility-aware TCP: no cubic wrapper (loss window off)", "err", t.it.CwndErr)
			}
			t.live.Store(t.it)
		}
	}
	return t.it
}

// addTCPAwareStats adds the BPF side's counters (sockets matched, settings applied, windows
// used) to ilnpctl show stats.
func (n *Node) addTCPAwareStats(stats map[string]uint64) {
	n.mu.Lock()
	t := n.tcpa
	n.mu.Unlock()
	if t == nil {
		return
	}
	if it := t.live.Load(); it != nil {
		if c, err := it.Counters(); err == nil {
			maps.Copy(stats, c)
		}
	}
}

func (n *Node) tcp() *tcpAware {
	if n.tcpa == nil {
		t := &tcpAware{policy: tcpaware.NewPolicy(n.cfg.TCPAware)}
		n.mu.Lock() // addTCPAwareStats reads the pointer off the loop
		n.tcpa = t
		n.mu.Unlock()
	}
	return n.tcpa
}

// tcpActiveChanged: the ILCC changed the local locators. When the active one changed (or
// died), every correspondent is moving until its LU-ACK arrives; the sockets learn it in one
// iterator run after the LUs have left (tcpFlush).
func (n *Node) tcpActiveChanged() {
	t := n.tcp()
	n.tcpEnsure()
	var loc wire.L64
	if a, ok := n.cache.Active(); ok {
		loc = a.Locator
	}
	if loc == t.lastActive {
		return
	}
	t.lastActive = loc
	for _, b := range n.cache.Bindings() {
		if u, ok := t.policy.MoveStarted(b.SessionRemote.Addr()); ok {
			t.deferred = append(t.deferred, u)
		}
	}
}

// tcpFlush applies the deferred updates (the end of Node.apply).
func (n *Node) tcpFlush() {
	t := n.tcpa
	if t == nil || len(t.deferred) == 0 {
		return
	}
	us := t.deferred
	t.deferred = nil
	n.tcpApply(us)
}

// tcpBeforeSwitch runs before the datapath carries out eff (Node.apply): when eff switches a
// path while the old one still works (make-before-break, soft handoff), nothing the TCP
// sockets send over the new path may overtake what is still in flight on the old one. The MN:
// its active locator changes and the old one is still usable and alive. It cannot tell yet
// whether the new path is the faster, so every correspondent's packets stay on the old
// locator while the LU goes out on the new one (tcpaware.Pins); at the LU-ACK the sockets
// drain if the exchange's RTT shows the new path faster, then the packets move
// (tcpMoveEnded). The move's start is decided here, so tcpActiveChanged finds it begun, and
// reaches the sockets after the LU has left (tcpFlush). The CN: a correspondent's active
// remote locator changes and the old one is still in its usable set (the correspondent
// switched first): its packets stay on the old locator until a probe has measured the new
// path (tcpaware.RemotePins, remotepin.go); where that cannot be done, its sockets drain
// (tcpaware.Policy.Switching) unless their ACKs already show the new path slower
// (bpf/tcpaware.c). A hard switch (the old locator gone or dead) drains nothing: its segments
// are lost, not overtaken. Pins and remote pins whose locator died, or whose switch was undone
// or overtaken by another, end here.
func (n *Node) tcpBeforeSwitch(eff ilcc.Effects) {
	t := n.tcp()
	var us []tcpaware.Update
	var active wire.L64
	if a, ok := n.cache.Active(); ok {
		active = a.Locator
	}
	for _, peer := range t.pins.Stale(active, n.localLive) {
		n.tcpUnpin(peer)
	}
	n.tcpStaleRemotePins()
	if eff.LocalChanged && t.lastActive != 0 && t.policy.Enabled() {
		if active != 0 && active != t.lastActive && n.localLive(t.lastActive) {
			for _, b := range n.cache.Bindings() {
				if u, ok := n.tcpSoftStart(b, t.lastActive); ok {
					us = append(us, u)
				}
			}
		}
	}
	for _, b := range eff.Bindings {
		// b.Was: the remote locator it replaces (the ILCC's, not a copy of every session's
		// here: issue 28).
		if prev := b.Was; prev != 0 && prev != b.RemoteLocator && b.RemoteUsable(prev) {
			if n.tcpRemotePin(b, prev) {
				continue
			}
			if u, ok := t.policy.Switching(b.SessionRemote.Addr(), true); ok {
				us = append(us, u)
			}
		}
	}
	for _, peer := range eff.Removed {
		t.pins.Release(peer)
		if t.rpins.Release(peer) {
			n.tcpRemoteUnpin(peer)
		}
	}
	// A drain must take hold before the datapath moves the packets; a move's start (the MN
	// pinned on the old path) waits until the LU has left.
	var now []tcpaware.Update
	for _, u := range us {
		if u.Entry.Drain != 0 {
			now = append(now, u)
		} else {
			t.deferred = append(t.deferred, u)
		}
	}
	n.tcpApply(now)
}

// tcpSoftStart begins the MN's soft switch for one correspondent: its packets stay on old
// until the LU-ACK (tcpaware.Pins), so its sockets only get the move's start now; the drain,
// if the new path proves faster, follows at the LU-ACK (tcpMoveEnded). When the datapath
// cannot pin, the sockets drain now as before (tcpaware.Policy.SoftMoveStarted).
func (n *Node) tcpSoftStart(b ilcc.Binding, old wire.L64) (tcpaware.Update, bool) {
	t := n.tcp()
	if _, pinned := t.pins.Pinned(b.Peer); pinned {
		return t.policy.MoveStarted(b.SessionRemote.Addr())
	}
	if !t.pins.Pin(b.Peer, old) {
		return t.policy.SoftMoveStarted(b.SessionRemote.Addr())
	}
	if _, err := n.dp.SetSessionsLocal(b.Peer, old); err != nil {
		t.pins.Release(b.Peer)
		n.count("tcpaware_errors")
		n.log.Warn("mobility-aware TCP: soft switch not held on the old path", "peer", b.Peer, "err", err)
		return t.policy.SoftMoveStarted(b.SessionRemote.Addr())
	}
	n.count("tcpaware_pins")
	return t.policy.MoveStarted(b.SessionRemote.Addr())
}

// maxSRTT is the largest srtt among the sockets of the correspondent seen as addr.
func maxSRTT(socks []tcpaware.Socket, addr netip.Addr) time.Duration {
	var m time.Duration
	for _, s := range socks {
		if s.Remote.Addr() == addr {
			m = max(m, time.Duration(s.SRTT8us/8)*time.Microsecond)
		}
	}
	return m
}

// tcpNextDeadline is when the next held soft switch is to be released (Node.armTimer).
func (n *Node) tcpNextDeadline() (time.Time, bool) {
	if n.tcpa == nil {
		return time.Time{}, false
	}
	return n.tcpa.pins.NextDeadline()
}

// tcpOnTimer releases the held soft switches whose time has come.
func (n *Node) tcpOnTimer(now time.Time) {
	if n.tcpa == nil {
		return
	}
	for _, peer := range n.tcpa.pins.Due(now) {
		n.tcpUnpin(peer)
	}
}

// tcpUnpin sends peer's packets from the active locator again.
func (n *Node) tcpUnpin(peer wire.NID) {
	if _, err := n.dp.SetSessionsLocal(peer, 0); err != nil {
		n.count("tcpaware_errors")
		n.log.Warn("mobility-aware TCP: soft switch not released", "peer", peer, "err", err)
	}
}

// localLive: loc is usable and the path liveness has not found it dead (a switch away from a
// dead locator is a hard one: nothing to drain, nothing to hold on it).
func (n *Node) localLive(loc wire.L64) bool {
	for _, l := range n.cache.Locals() {
		if l.Locator == loc {
			return l.State.Usable() && !l.Down
		}
	}
	return false
}

// tcpMoveEnded: the path to peer works again (the LU-ACK on the MN with the exchange's RTT,
// an applied LU on the CN with rtt 0).
func (n *Node) tcpMoveEnded(peer wire.NID, rtt time.Duration) {
	b, ok := n.cache.Binding(peer)
	if !ok {
		return
	}
	t := n.tcp()
	if _, pinned := t.pins.Pinned(peer); pinned && !t.pins.Lingering(peer) {
		// The sockets drain (when the path is the faster) before their packets move; onto a
		// path that is not, the packets stay one old srtt longer (tcpaware.Linger).
		var socks []tcpaware.Socket
		if u, ok := t.policy.SwitchAnswered(b.SessionRemote.Addr(), rtt); ok {
			socks = n.tcpApply([]tcpaware.Update{u})
		}
		if d := tcpaware.Linger(rtt, maxSRTT(socks, b.SessionRemote.Addr())); d > 0 {
			t.pins.ReleaseAfter(peer, time.Now().Add(d))
			return
		}
		t.pins.Release(peer)
		n.tcpUnpin(peer)
		return
	}
	if u, ok := t.policy.MoveEnded(b.SessionRemote.Addr(), rtt); ok {
		n.tcpApply([]tcpaware.Update{u})
	}
}

// SetTCPAware switches the reactions at run time (ilnpctl set tcp-aware on|off).
func (n *Node) SetTCPAware(ctx context.Context, on bool) error {
	return n.do(ctx, func() error {
		n.setTCPAware(on)
		return nil
	})
}

func (n *Node) setTCPAware(on bool) {
	n.cfg.TCPAware = on
	if !on {
		for _, peer := range n.tcp().pins.ReleaseAll() {
			n.tcpUnpin(peer)
		}
		for _, peer := range n.tcp().rpins.ReleaseAll() {
			n.tcpRemoteUnpin(peer)
		}
	}
	n.tcpApply(n.tcp().policy.SetEnabled(on))
	n.tcpEnsure()
}

// tcpApply writes the updates and runs the iterator once; reverts follow for the sockets of
// correspondents whose move ended. It returns the sockets the run matched.
func (n *Node) tcpApply(us []tcpaware.Update) []tcpaware.Socket {
	if len(us) == 0 {
		return nil
	}
	t := n.tcp()
	if n.tcpEnsure() == nil {
		n.count("tcpaware_unavailable")
		return nil
	}
	revert := map[netip.Addr]bool{}
	for _, u := range us {
		if err := t.it.SetPeer(u.Peer, u.Entry); err != nil {
			n.count("tcpaware_errors")
			n.log.Warn("mobility-aware TCP", "peer", u.Peer, "err", err)
			continue
		}
		if u.Revert {
			revert[u.Peer] = true
		}
	}
	socks, err := t.it.Run()
	n.count("tcpaware_runs")
	if err != nil {
		n.count("tcpaware_errors")
		n.log.Warn("mobility-aware TCP iterator", "err", err)
		return nil
	}
	var rev []tcpaware.Socket
	for _, s := range socks {
		if revert[s.Remote.Addr()] {
			rev = append(rev, s)
		}
	}
	sent, err := tcpaware.Revert(rev)
	if err != nil {
		n.count("tcpaware_errors")
		n.log.Warn("mobility-aware TCP revert", "err", err)
	}
	for range sent {
		n.count("tcpaware_reverts")
	}

	for _, u := range us {
		n.emit(timeline.Event{Kind: tcpAwareEvent, Detail: tcpaware.Describe(u, socks, sent)})
	}
	return socks
}

func (n *Node) tcpClose() error {
	if n.tcpa == nil || n.tcpa.it == nil {
		return nil
	}
	n.tcpa.live.Store(nil)
	err := n.tcpa.it.Close()
	n.tcpa.it = nil
	return err
}

// sampledRTT is the LU exchange's RTT when the ACK gave a sample (Karn: not after a
// retransmission), else 0.
func sampledRTT(res lu.Result) time.Duration {
	if !res.RTTSampled {
		return 0
	}
	return res.RTT
}
