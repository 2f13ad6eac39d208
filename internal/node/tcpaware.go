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
	// remotes is each correspondent's active remote locator as last programmed (for telling
	// a soft switch of the CN's sending from a hard one).
	remotes map[wire.NID]wire.L64
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
// died), every correspondent is moving until its LU-ACK arrives.
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
			n.tcpApply([]tcpaware.Update{u})
		}
	}
}

// tcpBeforeSwitch runs before the datapath carries out eff (Node.apply): when eff switches a
// path while the old one still works (make-before-break, soft handoff), the TCP sockets that
// will send over the new path get a drain first (tcpaware.Policy.Switching), so that nothing
// they send there overtakes what is still in flight on the old path. The MN: its active
// locator changes and the old one is still usable (every correspondent; the correspondent
// switches later; the move's start goes in the same run, so tcpActiveChanged finds it
// begun). The CN: a correspondent's active remote locator changes and the old one is still in
// its usable set (the correspondent switched first). A hard switch (the old locator gone)
// drains nothing: its segments are lost, not overtaken.
func (n *Node) tcpBeforeSwitch(eff ilcc.Effects) {
	t := n.tcp()
	if t.remotes == nil {
		t.remotes = map[wire.NID]wire.L64{}
	}
	var us []tcpaware.Update
	if eff.LocalChanged && t.lastActive != 0 && t.policy.Enabled() {
		if a, ok := n.cache.Active(); ok && a.Locator != t.lastActive && n.localUsable(t.lastActive) {
			for _, b := range n.cache.Bindings() {
				if u, ok := t.policy.SoftMoveStarted(b.SessionRemote.Addr()); ok {
					us = append(us, u)
				}
			}
		}
	}
	for _, b := range eff.Bindings {
		prev, known := t.remotes[b.Peer]
		t.remotes[b.Peer] = b.RemoteLocator
		if known && prev != b.RemoteLocator && b.RemoteUsable(prev) {
			if u, ok := t.policy.Switching(b.SessionRemote.Addr(), true); ok {
				us = append(us, u)
			}
		}
	}
	for _, peer := range eff.Removed {
		delete(t.remotes, peer)
	}
	n.tcpApply(us)
}

func (n *Node) localUsable(loc wire.L64) bool {
	for _, l := range n.cache.Locals() {
		if l.Locator == loc {
			return l.State.Usable()
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
	if u, ok := n.tcp().policy.MoveEnded(b.SessionRemote.Addr(), rtt); ok {
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
	n.tcpApply(n.tcp().policy.SetEnabled(on))
	n.tcpEnsure()
}

// tcpApply writes the updates and runs the iterator once; reverts follow for the sockets of
// correspondents whose move ended.
func (n *Node) tcpApply(us []tcpaware.Update) {
	if len(us) == 0 {
		return
	}
	t := n.tcp()
	if n.tcpEnsure() == nil {
		n.count("tcpaware_unavailable")
		return
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
		return
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
