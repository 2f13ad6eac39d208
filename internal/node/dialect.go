package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"

	"ilnp/internal/config"
	"ilnp/internal/dialect"
	"ilnp/internal/ilcc"
	"ilnp/internal/timeline"
	"ilnp/internal/wire"
)

// Peer dialects (internal/dialect): the glue between the LU path and the dialect table.

// newDialects builds the table with the configured per-peer overrides.
func newDialects(cfg config.Config) (*dialect.Table, error) {
	over := map[wire.NID]dialect.Profile{}
	for nid, name := range cfg.PeerDialects {
		p, err := dialect.Lookup(name)
		if err != nil {
			return nil, fmt.Errorf("peer-dialect %s: %w", nid, err)
		}
		over[nid] = p
	}
	return dialect.New(over), nil
}

// sendLU sends the engine's LU to b's correspondent in its dialect. When every locator is of
// a kind the peer has not shown it knows, nothing is sent and dialect.ErrNothingToSend is
// returned (counted as lu_dialect_withheld).
func (n *Node) sendLU(b ilcc.Binding, upd wire.LocatorUpdate) error {
	locs := make([]wire.L64, 0, len(b.RemoteLocators))
	for _, r := range b.RemoteLocators {
		locs = append(locs, r.Locator)
	}
	n.dialects.LearnLocators(b.Peer, locs)
	out, err := n.dialects.Outgoing(b.Peer, upd)
	if err != nil {
		if errors.Is(err, dialect.ErrNothingToSend) {
			n.count("lu_dialect_withheld")
		}
		return err
	}
	return n.lusock.sendPeer(b.SessionLocal.Addr(), b.SessionRemote.Addr(), out)
}

// queueLUAck acknowledges an LU from b's correspondent in the layout that correspondent uses,
// through the LU socket's ACK sender (luacks.go): queued, the sender counts it sent or failed;
// not queued (no sender, its queue full), it was sent here.
func (n *Node) queueLUAck(b ilcc.Binding, ack wire.LocatorUpdate) (queued bool, err error) {
	out := wire.PeerLU{Update: ack}
	if p := n.dialects.Profile(b.Peer); len(ack.Locators) == 1 {
		out.Layout, out.Checksum = p.Layout, p.Checksum
	}
	if queued, err := n.lusock.queueAck(b.Peer, b.SessionLocal.Addr(), b.SessionRemote.Addr(), out); queued || err != nil {
		return queued, err
	}
	return false, n.lusock.sendPeer(b.SessionLocal.Addr(), b.SessionRemote.Addr(), out)
}

// learnDialect records what a nonce-verified LU or LU-ACK from peer shows (called only once
// the ILCC has accepted its nonce).
func (n *Node) learnDialect(peer wire.NID, r receivedLU) {
	changed := n.dialects.LearnLU(peer, r.peer)
	if b, ok := n.cache.Binding(peer); ok {
		changed = n.dialects.LearnNonce(peer, r.nonce, b.LocalNonce) || changed
	}
	if changed && !n.dialects.Configured(peer) {
		p := n.dialects.Profile(peer)
		n.count("dialect_learned")
		n.log.Info("peer dialect learned", "peer", peer, "dialect", p.String())
	}
}

// openLUDstOpts opens the raw socket Locator Updates carrying a Destination Options header
// (every LU the datapath verified) are read from. The kernel hands a raw socket of protocol
// 60 the packet from that header on, before the ICMPv6 layer, and without checking the ICMPv6
// checksum: the ICMPv6 socket drops an LU whose checksum covers zeroed locators (the St
// Andrews rule) at recvmsg, and IPV6_CHECKSUM cannot be switched off on an ICMPv6 socket
// (RFC 3542 s.3.1; Linux returns EINVAL). wire.ParsePeerLU verifies the checksum instead,
// under both rules.
func openLUDstOpts() (*net.IPConn, error) {
	c, err := net.ListenPacket("ip6:60", "::")
	if err != nil {
		return nil, fmt.Errorf("raw Destination Options socket for Locator Updates: %w", err)
	}
	conn := c.(*net.IPConn)
	if err := ipv6.NewPacketConn(conn).SetControlMessage(ipv6.FlagDst|ipv6.FlagInterface, true); err != nil {
		conn.Close()
		return nil, fmt.Errorf("Destination Options socket control messages: %w", err)
	}
	if err := setSockoptInt(conn, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
		conn.Close()
		return nil, fmt.Errorf("SO_TIMESTAMPNS: %w", err)
	}
	return conn, nil
}

// readDstOpts delivers the LUs behind a Destination Options header until ctx ends or the
// socket is closed; other packets with such a header are ignored.
func (s *luSocket) readDstOpts(ctx context.Context, out chan<- receivedLU) {
	buf := make([]byte, 1500)
	oob := make([]byte, 512)
	for {
		n, oobn, _, from, err := s.do.ReadMsgIP(buf, oob)
		if err != nil {
			if errors.Is(err, net.ErrClosed) || ctx.Err() != nil {
				return
			}
			continue
		}
		offset := time.Now().UnixNano() - timeline.Now()
		r, ok := parseDstOptsLU(buf[:n], oob[:oobn], from, offset)
		if !ok {
			continue
		}
		select {
		case out <- r:
		case <-ctx.Done():
			return
		}
	}
}

// parseDstOptsLU reads one packet from the Destination Options socket: the header, then an
// ICMPv6 Locator Update. ok is false for anything else (not ours to report).
func parseDstOptsLU(pkt, oob []byte, from *net.IPAddr, realMinusMono int64) (receivedLU, bool) {
	if len(pkt) < 8 {
		return receivedLU{}, false
	}
	hlen := (int(pkt[1]) + 1) * 8
	if pkt[0] != wire.ProtoICMPv6 || len(pkt) <= hlen || pkt[hlen] != wire.ICMPv6TypeLocatorUpdate {
		return receivedLU{}, false
	}
	// An unchecked nonce option (0x8B, action bits "discard") makes the kernel drop the packet
	// after this socket has its copy: it was not for us to see (on an ILNP interface the
	// datapath has already dropped or marked it).
	if d, err := wire.ParseDestOpts(pkt[:hlen]); err == nil && d.HasNonce {
		return receivedLU{}, false
	}
	r := parseLUControl(oob, realMinusMono)
	r.nonce, r.nonceErr = wire.LocallyVerifiedNonce(pkt[:hlen])
	r.src = addrOf(from)
	msg := pkt[hlen:]
	r.size = len(msg)
	r.peer, r.err = parseLU(msg, r.src, r.dst)
	r.update = r.peer.Update
	return r, true
}
