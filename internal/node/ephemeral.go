package node

import (
	"errors"
	"fmt"
	"net/netip"

	"ilnp/internal/datapath"
	"ilnp/internal/ephemeral"
	"ilnp/internal/ilcc"
	"ilnp/internal/wire"
)

// nid-mode ephemeral: every correspondent this node opens a session to sees its own random NID
// (internal/ephemeral), and nobody else ever sees it. Applications stay unmodified: the
// kernel picks a socket's source address, and the host route every registered peer already
// has (host.routePeer) gets a source hint, [active locator : the peer's ephemeral NID], so a
// new connection or datagram towards the peer leaves from it. The address exists as a
// deprecated /128 on lo (the session view, which outlives its locator like the stable
// identity) and on the interface of every local locator (neighbour discovery); deprecated, the
// kernel never picks it for anyone else. The datapath needs nothing new: the ephemeral NID is
// one more local NID (local_nids), the session is keyed by it, and the kernel computed the
// checksums over the real address. Incoming sessions keep the stable NID the node publishes.
// A NID is retired, with its addresses, when the ILCC closes the session with its
// correspondent; a peer still registered by name gets a fresh one for its next session.

// ephemeralFor gives a registered peer its ephemeral NID (drawing one if it has none alive)
// and the kernel state it needs; the peer route is (re)written by the caller.
func (n *Node) ephemeralFor(peer wire.NID, peerAddr netip.Addr) error {
	nid, fresh, err := n.eph.For(peer)
	if err != nil {
		return err
	}
	if fresh {
		if err := n.dp.SetLocalNID(nid, 0); err != nil {
			n.eph.Retire(peer)
			return fmt.Errorf("ephemeral NID for %v: %w", peer, err)
		}
		n.count("ephemeral_nids_drawn")
		n.log.Info("ephemeral NID", "peer", peer, "nid", nid)
	}
	n.host.setPeerSource(peerAddr, nid)
	n.syncEphemeralAddrs()
	return nil
}

// syncEphemeralAddrs makes [L:E] exist on lo and on L's interface for every local locator L
// the ILCC holds and every live ephemeral NID E, and removes the interface addresses whose
// locator or NID is gone (identities on lo follow pruneIdentities).
func (n *Node) syncEphemeralAddrs() {
	if n.eph == nil {
		return
	}
	want := map[netip.Addr]int{}
	for _, p := range n.eph.Live() {
		for _, l := range n.cache.Locals() {
			if l.State != ilcc.Active && l.State != ilcc.Valid {
				continue
			}
			addr := wire.ILV{Locator: l.Locator, NID: p.NID}.Addr()
			want[addr] = l.IfIndex
			if err := n.host.addIdentity(addr); err != nil {
				n.log.Warn("ephemeral identity", "err", err)
			}
			if l.IfIndex > 0 {
				if err := n.host.addOnLink(l.IfIndex, addr); err != nil {
					n.log.Warn("ephemeral address", "err", err)
				}
			}
		}
	}
	for addr, idx := range n.host.onLink {
		if want[addr] != idx {
			if err := n.host.removeOnLink(addr); err != nil {
				n.log.Warn("ephemeral address", "err", err)
			}
		}
	}
}

// retireEphemeral ends the ephemeral NID of a correspondent whose session closed and, when the
// correspondent is still registered by name, draws the next one for its route.
func (n *Node) retireEphemeral(peer wire.NID) {
	if n.eph == nil {
		return
	}
	nid, ok := n.eph.Retire(peer)
	if !ok {
		return
	}
	n.count("ephemeral_nids_retired")
	n.log.Info("ephemeral NID retired", "peer", peer, "nid", nid)
	if err := n.dp.DeleteLocalNID(nid); err != nil && !errors.Is(err, datapath.ErrNotFound) {
		n.log.Warn("ephemeral NID", "err", err)
	}
	var routed []netip.Addr
	for addr, src := range n.host.peerSrc {
		if src == nid {
			routed = append(routed, addr)
			n.host.setPeerSource(addr, 0)
		}
	}
	for _, addr := range routed {
		if err := n.ephemeralFor(peer, addr); err != nil {
			n.log.Warn("next ephemeral NID", "peer", peer, "err", err)
			continue
		}
		n.routeAdopted(addr)
	}
	n.syncEphemeralAddrs()
	n.pruneIdentities()
}

// localNID says whether nid is one of this node's (stable or a live ephemeral one).
func (n *Node) localNID(nid wire.NID) bool {
	if nid == n.nid {
		return true
	}
	if n.eph == nil {
		return false
	}
	_, ok := n.eph.Owner(nid)
	return ok
}

func newEphemeralPool(stable wire.NID) (*ephemeral.Pool, error) {
	p, err := ephemeral.New(ephemeral.Config{Stable: stable})
	if err != nil {
		return nil, fmt.Errorf("ephemeral NIDs: %w", err)
	}
	return p, nil
}
