package node

import (
	"fmt"
	"slices"
	"time"

	"ilnp/internal/datapath"
	"ilnp/internal/ilcc"
	"ilnp/internal/lu"
	"ilnp/internal/luguard"
	"ilnp/internal/timeline"
	"ilnp/internal/wire"
)

// Incoming Locator Updates and LU-ACKs, as one pipeline: verify (what the datapath checked and
// marked), session (the ILCC must hold one: an LU never opens a session, issue 23), guard
// (replays, luguard), apply (the ILCC), effects (verification, datapath, the budgeted ACK).
// Each stage either passes the message on or drops it with a named counter.

// luIn is a received LU that passed the verify stage.
type luIn struct {
	r    receivedLU
	peer wire.NID
	src  wire.ILV
}

// onLU handles a Locator Update or LU-ACK read from the raw socket. It believes nothing it has
// not checked itself: the message must have arrived on an ILNP interface (elsewhere no datapath
// checked it) and carry the nonce the datapath verified and marked, and that nonce must be the
// session's (the ILCC compares it; an ACK must also match the outstanding LU, lu.Engine.Ack).
func (n *Node) onLU(r receivedLU) {
	in, ok := n.luVerify(r)
	if !ok {
		return
	}
	switch r.update.Op {
	case wire.OpAdvertisement:
		n.luAdvertisement(in, time.Now())
	case wire.OpAcknowledgement:
		n.luAck(in, time.Now())
	}
}

// luVerify is the first stage: where the message came from and what the datapath vouched for.
func (n *Node) luVerify(r receivedLU) (luIn, bool) {
	if _, ok := n.ifaces[r.ifindex]; !ok {
		n.securityEvent("lu_foreign_interface", "Locator Update from an interface without the ILNP datapath ignored",
			"src", r.src, "ifindex", r.ifindex)
		return luIn{}, false
	}
	if r.err != nil {
		n.securityEvent("lu_malformed", "malformed Locator Update dropped", "src", r.src, "err", r.err)
		return luIn{}, false
	}
	src, err := wire.ILVFromAddr(r.src)
	if err != nil {
		n.securityEvent("lu_malformed", "Locator Update from a non-ILNP address dropped", "src", r.src)
		return luIn{}, false
	}
	if r.nonceErr != nil {
		n.securityEvent("lu_unverified", "Locator Update without a datapath-verified nonce dropped",
			"src", r.src, "err", r.nonceErr)
		return luIn{}, false
	}
	return luIn{r: r, peer: src.NID, src: src}, true
}

// luSession is the session stage: the ILCC knows the peer, or the datapath holds a session
// with it whose event the loop has not read yet (the LU overtook it, or the ring lost it,
// reconcile.go): that one is adopted. Nothing is no session: the datapath drops such LUs
// itself (ingress_lu_no_session); this is the same rule for anything that slipped by. An
// embryo (a correspondent's first packet, which this host has not answered yet) is no session
// either, but its LU carried the embryo's nonce: it is held until this host answers and the
// session becomes real (openSession releases it), or dropped after heldLULifetime. That is
// how a correspondent with locators of the other family announces them at once (xfamily.go)
// without an LU ever opening a session.
func (n *Node) luSession(in luIn) bool {
	if _, known := n.cache.Binding(in.peer); known {
		return true
	}
	if dst, err := wire.ILVFromAddr(in.r.dst); err == nil {
		if s, err := n.dp.GetSession(dst.NID, in.peer); err == nil {
			if s.Flags&datapath.SessionEmbryonic != 0 {
				n.holdLU(in)
				return false
			}
			n.openSession(dst.NID, in.peer, in.r.at, "adopted: its Locator Update came first", s.Flags&datapath.SessionInitiator != 0)
			if _, known := n.cache.Binding(in.peer); known {
				return true
			}
		}
	}
	n.securityEvent("lu_no_session", "Locator Update for no session dropped", "src", in.r.src, "dst", in.r.dst)
	return false
}

// Held LUs of embryos: at most maxHeldLUs (one per correspondent, the latest), each for
// heldLULifetime (the sender retransmits after 1 s anyway, internal/lu).
const (
	maxHeldLUs     = 64
	heldLULifetime = 2 * time.Second
)

type heldLU struct {
	r     receivedLU
	until time.Time
}

func (n *Node) holdLU(in luIn) {
	now := time.Now()
	for p, h := range n.heldLUs {
		if !now.Before(h.until) {
			delete(n.heldLUs, p)
		}
	}
	if _, ok := n.heldLUs[in.peer]; !ok && len(n.heldLUs) >= maxHeldLUs {
		n.securityEvent("lu_hold_full", "Locator Update of an unanswered session dropped: too many held", "src", in.r.src)
		return
	}
	if n.heldLUs == nil {
		n.heldLUs = map[wire.NID]heldLU{}
	}
	n.heldLUs[in.peer] = heldLU{r: in.r, until: now.Add(heldLULifetime)}
	n.count("lu_held")
}

// releaseHeldLU runs the LU held for peer, if any, now that its session is real.
func (n *Node) releaseHeldLU(peer wire.NID) {
	h, ok := n.heldLUs[peer]
	if !ok {
		return
	}
	delete(n.heldLUs, peer)
	if time.Now().Before(h.until) {
		n.count("lu_released")
		n.onLU(h.r)
	}
}

// luAdvertisement runs an LU through the session, guard, apply and effects stages.
func (n *Node) luAdvertisement(in luIn, now time.Time) {
	r, peer := in.r, in.peer
	if !n.luSession(in) {
		return
	}
	n.learnDialect(peer, r)
	digest := luguard.DigestOf(r.update)
	verdict := n.guard.Check(peer, digest)
	fresh := verdict == luguard.Fresh // never applied: no replay (locverify.RecentlyVerified)
	if verdict == luguard.Replay && n.dialects.Profile(peer).RepeatsAdvertisements() {
		// A peer of another dialect moving back repeats its old body: not dropped, but its
		// returning locator is verified again (locverify) like any that left the set.
		verdict = luguard.Fresh
	}
	n.count("lu_received")
	n.emit(timeline.Event{MonoNS: r.at, Kind: timeline.LUReceived, Peer: peer.String(), Locator: in.src.Locator.String(),
		Detail: fmt.Sprintf("locators=%d %s", len(r.update.Locators), verdict)})
	if verdict == luguard.Replay {
		// Applied before and superseded since: a copy from the path, not the peer now.
		if n.securityEvent("lu_replayed", "replayed Locator Update dropped", "src", r.src) {
			n.emit(timeline.Event{Kind: timeline.BadNonce, Peer: peer.String(), Detail: "replayed Locator Update"})
		}
		return
	}
	// From behind a NAT the LU's sender lists an IPv4 endpoint we cannot reach; the one it
	// came from takes its place (xfamily.go). The ACK echoes the body as sent.
	before, _ := n.cache.Binding(peer)
	eff, err := n.cache.ApplyLU(peer, r.nonce, translateLU(r.update, in.src.Locator), now)
	if err != nil {
		if !ilcc.IsSecurityEvent(err) {
			n.log.Warn("Locator Update not applied", "src", r.src, "err", err)
		} else if n.securityEvent("lu_rejected", "Locator Update rejected", "src", r.src, "err", err) {
			n.emit(timeline.Event{Kind: timeline.BadNonce, Peer: peer.String(), Detail: err.Error()})
		}
		return
	}
	n.guard.Applied(peer, digest)
	eff.Acks = slices.DeleteFunc(eff.Acks, func(ilcc.Ack) bool {
		// Every new body is acknowledged (RFC 6743 s.3): only repeats of a body can be had
		// for free (a captured LU sent again), so only they draw on the budget. A peer moving
		// faster than the budget lost the ACKs of its real moves to it (lab, chapter 6's
		// success runs: 18 % of LU exchanges needed a retransmission on a clean path).
		if fresh || n.guard.AllowAck(peer, now) {
			return false
		}
		n.count("lu_acks_withheld")
		return true
	})
	for i := range eff.Acks {
		eff.Acks[i].Update = r.update.Ack()
	}
	// lu_received is already on the timeline (above, stamped on arrival with the locator
	// it came from, and also for LUs that are then rejected): drop the ILCC's copy.
	eff.Events = slices.DeleteFunc(eff.Events, func(e ilcc.Event) bool { return e.Kind == timeline.LUReceived })
	n.count("lu_applied")
	// New locators get their credit limit before anything leaves towards them, the
	// LU-ACK included.
	later := n.lvAnnounced(peer, translateLU(r.update, in.src.Locator), in.src.Locator, r.size, fresh)
	n.apply(eff, now)
	n.performLV(later)
	if after, ok := n.cache.Binding(peer); ok && after.RemoteLocator != before.RemoteLocator {
		n.pathsAbandoned(peer, before.RemoteLocator)
	}
	n.tcpMoveEnded(peer, 0)
}

// luAck runs an LU-ACK through the nonce check and the LU engine.
func (n *Node) luAck(in luIn, now time.Time) {
	r, peer := in.r, in.peer
	if err := n.cache.VerifyNonce(peer, r.nonce); err != nil {
		if n.securityEvent("lu_ack_rejected", "LU-ACK rejected", "src", r.src, "err", err) && ilcc.IsSecurityEvent(err) {
			n.emit(timeline.Event{Kind: timeline.BadNonce, Peer: peer.String(), Detail: err.Error()})
		}
		return
	}
	n.learnDialect(peer, r)
	res, actions := n.engine.Ack(peer, n.dialects.Ack(peer, r.update), now)
	n.count("lu_ack_" + res.Outcome.String())
	ev := timeline.Event{MonoNS: r.at, Kind: timeline.LUAckReceived, Peer: peer.String(), Locator: in.src.Locator.String(),
		Attempt: res.Attempts, Detail: "outcome=" + res.Outcome.String()}
	if res.Outcome == lu.Acked {
		ev.Duration = res.Elapsed.Nanoseconds()
		if res.RTTSampled {
			ev.Detail = joinDetail(ev.Detail, "rtt="+res.RTT.String())
		}
	}
	n.emit(ev)
	if res.Outcome == lu.Acked {
		n.tcpMoveEnded(peer, sampledRTT(res))
	}
	n.perform(actions)
}
