package node

import (
	"errors"
	"fmt"
	"time"

	"ilnp/internal/datapath"
	"ilnp/internal/pmtu"
	"ilnp/internal/timeline"
)

// clampPathMTU: the datapath translated a Packet Too Big quoting this session's own nonce
// whose path leaves the session view less than IPv6's 1280-byte minimum (bpf/lib/icmperr.h).
// The kernel will not learn such a PMTU, so the correspondent's view gets a host route with
// the locked MTU the event names (internal/pmtu).
func (n *Node) clampPathMTU(ev datapath.Event, now time.Time) {
	s, err := n.dp.GetSession(ev.LocalNID, ev.RemoteNID)
	if err != nil {
		return
	}
	dst := s.RemoteAddr()
	install, err := n.pmtu.Want(dst, ev.MTU, now)
	if err != nil {
		n.log.Warn("path MTU not clamped", "peer", ev.RemoteNID, "err", err)
		return
	}
	mtu := n.pmtu.MTU(dst)
	// A repeated error with the route in place is a packet sent before it was; one without it
	// means the kernel took it away (its interface went down): put it back. The daemon's own
	// peer route to dst, where it keeps one, carries the clamp (one route per destination:
	// a second one would replace it, and removing that would remove the peer route).
	present := !install && pmtu.Present(dst, mtu)
	if present {
		return
	}
	owned, err := n.host.clampPeer(dst, mtu, !install)
	if !owned && err == nil {
		err = pmtu.Install(dst, mtu)
	}
	if err != nil {
		n.count("pmtu_clamp_errors")
		n.log.Warn("path MTU not clamped", "peer", ev.RemoteNID, "err", err)
		return
	}
	n.count("pmtu_clamps")
	n.emit(timeline.Event{MonoNS: int64(ev.Ns), Kind: timeline.PathMTUClamp, Peer: ev.RemoteNID.String(),
		Detail: fmt.Sprintf("%s mtu %d (Packet Too Big from %s)", dst, mtu, ev.Src)})
	n.log.Info("path MTU below the IPv6 minimum once the nonce is in: session view clamped by a host route",
		"dst", dst, "mtu", mtu, "from", ev.Src)
}

// expireClamps removes the routes whose last Packet Too Big is older than pmtu.Lifetime
// (RFC 8201 s.4): the kernel's own discovery takes over and a small path clamps again.
func (n *Node) expireClamps(now time.Time) {
	for _, dst := range n.pmtu.Expire(now) {
		owned, err := n.host.clampPeer(dst, 0, false)
		if !owned && err == nil {
			err = pmtu.Remove(dst)
		}
		if err != nil {
			n.log.Warn("path MTU clamp", "err", err)
		}
	}
}

// unclampAll removes the clamp routes of this daemon's own at its stop; the peer routes
// carrying one stay for the next daemon, which adopts or rewrites them.
func (n *Node) unclampAll() error {
	var errs []error
	for _, dst := range n.pmtu.All() {
		if n.host.peerRoutes.get(dst) == nil {
			errs = append(errs, pmtu.Remove(dst))
		}
	}
	return errors.Join(errs...)
}
