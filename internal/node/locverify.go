package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"

	"ilnp/internal/datapath"
	"ilnp/internal/encap"
	"ilnp/internal/locverify"
	"ilnp/internal/wire"
)

// Locator verification (internal/locverify; README "Security"): the daemon sends the engine's
// challenges as ICMPv6 Echo Requests to [locator:NID], reads the Echo Replies and keeps the
// datapath's unverified map (bpf/lib/verify.h) in step with the engine.

// redirectMark is the skb mark the datapath's egress passes untranslated (bpf/ilnp.c
// ILNP_REDIRECT_MARK): a challenge must reach exactly the wire address it names, not the
// session's active locator.
const redirectMark = 0x494c4e50

// challengeSocket sends challenges and receives their echoes.
type challengeSocket struct {
	*echoSocket
}

// receivedEcho is one Echo Reply carrying a token.
type receivedEcho struct {
	src   netip.Addr
	token locverify.Token
}

func openChallengeSocket() (*challengeSocket, error) {
	s, err := openEchoSocket("locator challenges")
	if err != nil {
		return nil, err
	}
	if err := setSockoptInt(s.conn, unix.SOL_SOCKET, unix.SO_MARK, redirectMark); err != nil {
		s.Close()
		return nil, fmt.Errorf("SO_MARK: %w", err)
	}
	return &challengeSocket{s}, nil
}

// send writes one challenge from src to dst with the socket mark mark (the kernel fills in the
// checksum).
func (s *challengeSocket) send(src, dst netip.Addr, mark uint32, token locverify.Token) error {
	if err := setSockoptInt(s.conn, unix.SOL_SOCKET, unix.SO_MARK, int(mark)); err != nil {
		return fmt.Errorf("challenge mark: %w", err)
	}
	msg, err := (&icmp.Message{Type: ipv6.ICMPTypeEchoRequest,
		Body: &icmp.Echo{ID: int(s.id), Seq: 0, Data: token[:]}}).Marshal(nil)
	if err != nil {
		return fmt.Errorf("encode challenge: %w", err)
	}
	cm := &ipv6.ControlMessage{Src: src.AsSlice(), HopLimit: 64}
	if _, err := s.pc.WriteTo(msg, cm, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
		return fmt.Errorf("challenge %s -> %s: %w", src, dst, err)
	}
	return nil
}

// read delivers the echoes of this daemon's challenges until ctx ends or the socket closes;
// other Echo Replies (pings of applications) are skipped.
func (s *challengeSocket) read(ctx context.Context, out chan<- receivedEcho) {
	buf := make([]byte, 1500)
	for {
		n, from, err := s.conn.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) || ctx.Err() != nil {
				return
			}
			continue
		}
		e, ok := parseEcho(buf[:n], s.id)
		if !ok {
			continue
		}
		if a, ok := from.(*net.IPAddr); ok {
			e.src, _ = netip.AddrFromSlice(a.IP)
			e.src = e.src.Unmap()
		}
		select {
		case out <- e:
		case <-ctx.Done():
			return
		}
	}
}

// parseEcho reads an Echo Reply with this daemon's identifier and a token-sized body.
func parseEcho(b []byte, id uint16) (receivedEcho, bool) {
	m, err := icmp.ParseMessage(58, b)
	if err != nil || m.Type != ipv6.ICMPTypeEchoReply {
		return receivedEcho{}, false
	}
	echo, ok := m.Body.(*icmp.Echo)
	if !ok || echo.ID != int(id) || len(echo.Data) != locverify.TokenSize {
		return receivedEcho{}, false
	}
	var e receivedEcho
	copy(e.token[:], echo.Data)
	return e, true
}

// lvOpened tells the engine about a session that opened (or was adopted) with these remote
// locators. probe: challenge the correspondent now (a session this node opened); a session the
// correspondent opened is probed by lvProbe once it received more than its first packet.
func (n *Node) lvOpened(peer wire.NID, locs []wire.L64, active wire.L64, probe bool) {
	if n.lv == nil || n.lv.Known(peer) {
		return
	}
	actions, err := n.lv.Opened(peer, locs, active, probe, time.Now())
	if err != nil {
		n.log.Warn("locator verification", "peer", peer, "err", err)
	}
	n.performLV(actions)
}

// lvResumed carries the verification state of a session adopted from an earlier daemon over:
// the locators the datapath still limits stay limited and are challenged afresh (README,
// Security); with verification off the limits go.
func (n *Node) lvResumed(s datapath.Session, all []datapath.Unverified) {
	var credits []locverify.Credit
	for _, u := range all {
		if u.RemoteNID == s.RemoteNID && u.LocalNID == s.LocalNID {
			credits = append(credits, locverify.Credit{Locator: u.Locator, RxBytes: u.RxBytes, TxBytes: u.TxBytes})
		}
	}
	if n.lv == nil {
		if len(credits) > 0 {
			if err := n.dp.DeleteUnverified(s.RemoteNID, 0); err != nil {
				n.log.Warn("unverified locators", "peer", s.RemoteNID, "err", err)
			}
		}
		return
	}
	if n.lv.Known(s.RemoteNID) {
		return
	}
	actions, err := n.lv.Resumed(s.RemoteNID, remoteL64s(s.RemoteLocators), sessionRemoteActive(s), credits, time.Now())
	if err != nil {
		n.log.Warn("locator verification", "peer", s.RemoteNID, "err", err)
	}
	if len(credits) > 0 {
		n.log.Info("locator verification resumed", "peer", s.RemoteNID, "unverified", len(credits))
	}
	n.performLV(actions)
}

// lvProbe challenges the correspondents of responder sessions that proved themselves (more
// than the first packet received; touchSessions calls it with the datapath's sessions), so that
// a spoofed packet never makes this node send a challenge.
func (n *Node) lvProbe(sessions []datapath.Session) {
	if n.lv == nil {
		return
	}
	now := time.Now()
	for _, s := range sessions {
		if s.RxPackets <= unprovenPackets || !n.lv.Known(s.RemoteNID) || n.lv.Answered(s.RemoteNID) {
			continue
		}
		actions, err := n.lv.Probe(s.RemoteNID, sessionRemoteActive(s), now)
		if err != nil {
			n.log.Warn("locator verification", "peer", s.RemoteNID, "err", err)
		}
		n.performLV(actions)
	}
}

// lvAnnounced tells the engine about an applied Locator Update of peer. It returns the
// challenges to IPv4 locators, for the caller to perform once the datapath's session lists them
// (after apply); everything else is done at once.
func (n *Node) lvAnnounced(peer wire.NID, upd wire.LocatorUpdate, from wire.L64, size int, fresh bool) (later []locverify.Action) {
	if n.lv == nil {
		return nil
	}
	locs := make([]wire.L64, 0, len(upd.Locators))
	for _, e := range upd.Locators {
		locs = append(locs, e.Locator)
	}
	// The LU's own bytes are its sender's first credit: Ethernet and IPv6 headers and the
	// ICMPv6 message (its nonce header, and the encapsulation of one from an IPv4 endpoint,
	// are not counted).
	actions, err := n.lv.Announced(peer, locs, from, uint64(14+40+size), fresh, time.Now())
	if err != nil {
		n.log.Warn("locator verification", "peer", peer, "err", err)
	}
	return n.performLVNow(actions)
}

// performLVNow performs actions but the challenges to IPv4 locators, which it returns.
func (n *Node) performLVNow(actions []locverify.Action) (later []locverify.Action) {
	now := actions[:0:0]
	for _, a := range actions {
		if a.Kind == locverify.SendChallenge && encap.IsL32(a.Locator) {
			later = append(later, a)
		} else {
			now = append(now, a)
		}
	}
	n.performLV(now)
	return later
}

// roamCredit is the least a nonce-verified packet from an IPv4 endpoint puts on the wire:
// Ethernet, IPv4, UDP, IPv6 and the smallest nonce header.
const roamCredit = 14 + encap.Overhead + 40 + 8

// lvRoamed tells the engine that peer's NAT endpoint moved to l (a nonce-verified packet
// came from there): a new locator like one an LU announces, whose first credit is that packet.
// Its challenge is returned as lvAnnounced's are.
func (n *Node) lvRoamed(peer wire.NID, l wire.L64) (later []locverify.Action) {
	if n.lv == nil {
		return nil
	}
	actions, err := n.lv.Roamed(peer, l, roamCredit, time.Now())
	if err != nil {
		n.log.Warn("locator verification", "peer", peer, "err", err)
	}
	return n.performLVNow(actions)
}

// onEcho handles an Echo Reply to one of the daemon's challenges.
func (n *Node) onEcho(e receivedEcho) {
	src, err := wire.ILVFromAddr(e.src)
	if err != nil {
		return
	}
	actions, ok := n.lv.Echoed(src.NID, e.token, time.Now())
	if !ok {
		n.count("lv_echo_unmatched")
		return
	}
	n.count("lv_echoes")
	n.performLV(actions)
}

// lvClosed forgets a correspondent whose session closed.
func (n *Node) lvClosed(peer wire.NID) {
	if n.lv == nil {
		return
	}
	n.lv.Closed(peer)
	if err := n.dp.DeleteUnverified(peer, 0); err != nil {
		n.log.Warn("unverified locators", "peer", peer, "err", err)
	}
}

func (n *Node) performLV(actions []locverify.Action) {
	for _, a := range actions {
		switch a.Kind {
		case locverify.SendChallenge:
			b, ok := n.cache.Binding(a.Peer)
			active, okActive := n.cache.Active()
			if !ok || !okActive || n.chsock == nil {
				continue
			}
			// An IPv6 locator is challenged at [locator:NID] directly, past the datapath; an
			// IPv4 one only the egress can reach (it encapsulates), so the challenge goes
			// between the session's view addresses with a mark naming the locator.
			src := wire.ILV{Locator: active.Locator, NID: b.SessionLocal.NID}.Addr()
			dst := wire.ILV{Locator: a.Locator, NID: a.Peer}.Addr()
			mark := uint32(redirectMark)
			if encap.IsL32(a.Locator) {
				var err error
				if mark, err = n.dp.ChallengeMarkFor(b.SessionLocal.NID, a.Peer, a.Locator); err != nil {
					n.count("lv_challenge_errors")
					n.log.Warn("locator challenge", "peer", a.Peer, "err", err)
					continue
				}
				src, dst = b.SessionLocal.Addr(), b.SessionRemote.Addr()
			}
			if err := n.chsock.send(src, dst, mark, a.Token); err != nil {
				n.count("lv_challenge_errors")
				n.log.Warn("locator challenge", "peer", a.Peer, "err", err)
				continue
			}
			n.count("lv_challenges_sent")
		case locverify.MarkUnverified:
			marked := 0
			for _, local := range n.localNIDsFor(a.Peer) {
				err := n.dp.PutUnverified(local, a.Peer, a.Locator, a.RxBytes, a.TxBytes)
				switch {
				case err == nil:
					marked++
				case !errors.Is(err, datapath.ErrNotFound):
					n.log.Warn("unverified locator", "peer", a.Peer, "locator", a.Locator, "err", err)
				}
			}
			if marked == 0 {
				continue
			}
			n.count("lv_locators_unverified")
			n.log.Debug("locator unverified: credit until it echoes", "peer", a.Peer, "locator", a.Locator,
				"credit_bytes", locverify.Factor*a.RxBytes-a.TxBytes)
		case locverify.MarkVerified:
			if err := n.dp.DeleteUnverified(a.Peer, a.Locator); err != nil && !errors.Is(err, datapath.ErrNotFound) {
				n.log.Warn("verified locator", "peer", a.Peer, "locator", a.Locator, "err", err)
			}
			n.count("lv_locators_verified")
			n.log.Debug("locator verified", "peer", a.Peer, "locator", a.Locator)
		case locverify.Believed:
			n.count("lv_locators_believed")
		case locverify.Returned:
			n.count("lv_locators_returned")
		case locverify.Charge:
			for _, local := range n.localNIDsFor(a.Peer) {
				err := n.dp.ChargeUnverified(local, a.Peer, a.Locator, a.TxBytes)
				if err != nil && !errors.Is(err, datapath.ErrNotFound) {
					n.log.Warn("unverified locator", "peer", a.Peer, "locator", a.Locator, "err", err)
				}
			}
		}
	}
}
