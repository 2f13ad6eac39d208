package node

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"

	"ilnp/internal/encap"
	"ilnp/internal/timeline"
	"ilnp/internal/wire"
)

// luSocket sends and receives ICMPv6 Locator Updates on a raw socket.
//
// LUs are sent between the session-view addresses, like any other packet of the session: the
// datapath's egress rewrites them to the active locators, inserts the session's nonce and fixes
// the checksum, so the daemon never builds a nonce option itself and an LU takes exactly the
// path (and interface) the session's data takes. On receipt the datapath has already checked
// the nonce (an LU without the session's nonce is dropped and counted there) and marked it
// (wire.VerifiedNonceOptionType); it keeps the LU's wire addresses so the daemon sees where it
// came from. The daemon trusts none of that blindly: it reads the interface the LU arrived on
// (IPV6_PKTINFO) and the nonce it carried (IPV6_RECVDSTOPTS) and checks both itself (onLU).
type luSocket struct {
	conn *net.IPConn
	pc   *ipv6.PacketConn
	// do receives the LUs that carry a Destination Options header (dialect.go); conn then
	// only those without one, which onLU refuses as unverified.
	do *net.IPConn
	// acks sends LU-ACKs in batches (luacks.go); nil: each is sent on the loop.
	acks *ackSender
}

// receivedLU is one LU or LU-ACK read from the socket.
type receivedLU struct {
	src, dst netip.Addr
	ifindex  int
	update   wire.LocatorUpdate
	peer     wire.PeerLU // update with the layout and checksum rule it came in
	err      error
	// dstopts: the packet had a Destination Options header (read from luSocket.do instead).
	dstopts bool
	// nonce is the nonce the datapath verified and marked in the packet; nonceErr says why
	// there is none (no Destination Options header, an unchecked nonce option, ...).
	nonce    wire.Nonce
	nonceErr error
	// at is the kernel's arrival stamp (SO_TIMESTAMPNS) on CLOCK_MONOTONIC, the timeline's
	// clock; 0 when the kernel gave none. LUs and LU-ACKs are timed at arrival, as the MIPv6
	// baseline's Binding Acks are, not after this daemon's queue and processing.
	at int64
	// size is the ICMPv6 message's length (locator verification credits it to the sender).
	size int
}

func openLUSocket() (*luSocket, error) {
	c, err := net.ListenPacket("ip6:ipv6-icmp", "::")
	if err != nil {
		return nil, fmt.Errorf("raw ICMPv6 socket for Locator Updates: %w", err)
	}
	conn := c.(*net.IPConn)
	pc := ipv6.NewPacketConn(conn)
	var filter ipv6.ICMPFilter
	filter.SetAll(true)
	filter.Accept(ipv6.ICMPType(wire.ICMPv6TypeLocatorUpdate))
	if err := pc.SetICMPFilter(&filter); err != nil {
		conn.Close()
		return nil, fmt.Errorf("ICMPv6 filter: %w", err)
	}
	if err := pc.SetControlMessage(ipv6.FlagDst|ipv6.FlagInterface, true); err != nil {
		conn.Close()
		return nil, fmt.Errorf("ICMPv6 control messages: %w", err)
	}
	if err := setSockoptInt(conn, unix.IPPROTO_IPV6, unix.IPV6_RECVDSTOPTS, 1); err != nil {
		conn.Close()
		return nil, fmt.Errorf("IPV6_RECVDSTOPTS: %w", err)
	}
	if err := setSockoptInt(conn, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
		conn.Close()
		return nil, fmt.Errorf("SO_TIMESTAMPNS: %w", err)
	}
	if err := setLUBuffer(conn); err != nil {
		conn.Close()
		return nil, err
	}
	do, err := openLUDstOpts()
	if err != nil {
		conn.Close()
		return nil, err
	}
	if err := setLUBuffer(do); err != nil {
		conn.Close()
		do.Close()
		return nil, err
	}
	return &luSocket{conn: conn, pc: pc, do: do}, nil
}

// luSocketBuffer is the LU sockets' receive buffer. The default (~200 KB, some 200 LUs as the
// kernel accounts them) overflowed while the loop was busy for a moment (the state file of
// 10,000 sessions, a path poll) during a mass move at a correspondent: 158 of 6,000 LUs at
// 2,000 a second were dropped unanswered (issue 28). 8 MB holds over a second of 10,000 LUs a
// second.
const luSocketBuffer = 8 << 20

// setLUBuffer gives an LU socket luSocketBuffer: forced where the daemon may (CAP_NET_ADMIN),
// else as much as net.core.rmem_max allows.
func setLUBuffer(conn *net.IPConn) error {
	if err := setSockoptInt(conn, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, luSocketBuffer); err != nil {
		if err := setSockoptInt(conn, unix.SOL_SOCKET, unix.SO_RCVBUF, luSocketBuffer); err != nil {
			return fmt.Errorf("LU socket SO_RCVBUF: %w", err)
		}
	}
	return nil
}

func (s *luSocket) Close() error { return errors.Join(s.conn.Close(), s.do.Close()) }

// joinSolicitedNode joins the solicited-node multicast group (RFC 4291 s.2.7.1) of [any
// locator:nid] on ifindex for as long as the socket is open. Every locator of the node shares
// the NID and so this one group. The kernel joins it too, but only when its DAD work for a new
// address begins, a few milliseconds after the address is added and usable (optimistic): a
// router's Neighbor Solicitation for the new locator in that window (for the LU-ACK, the first
// packet towards it) is dropped as an unjoined multicast, and the router asks again only after
// RetransTimer (1 s), losing the ACK and the data queued behind it. Seen in the integration test.
func (s *luSocket) joinSolicitedNode(ifindex int, nid wire.NID) error {
	ifi, err := net.InterfaceByIndex(ifindex)
	if err != nil {
		return fmt.Errorf("solicited-node group: interface %d: %w", ifindex, err)
	}
	group := netip.MustParseAddr("ff02::1:ff00:0").As16()
	group[13], group[14], group[15] = byte(nid>>16), byte(nid>>8), byte(nid)
	if err := s.pc.JoinGroup(ifi, &net.IPAddr{IP: group[:]}); err != nil {
		return fmt.Errorf("join solicited-node group %s on %s: %w", netip.AddrFrom16(group), ifi.Name, err)
	}
	return nil
}

// sendPeer writes one LU (advertisement or ACK) from src to dst in lu's layout. The kernel
// fills in the ICMPv6 checksum for raw ICMPv6 sockets (RFC 3542 s.3.1), always over the full
// addresses, and the datapath adjusts it after rewriting: lu.Checksum cannot take effect here.
func (s *luSocket) sendPeer(src, dst netip.Addr, lu wire.PeerLU) error {
	msg, err := lu.Marshal(src, dst)
	if err != nil {
		return fmt.Errorf("encode LU: %w", err)
	}
	cm := &ipv6.ControlMessage{Src: src.AsSlice(), HopLimit: 64}
	if _, err := s.pc.WriteTo(msg, cm, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
		return fmt.Errorf("send LU %s -> %s: %w", src, dst, err)
	}
	return nil
}

// read delivers received LUs until ctx ends or the socket is closed.
func (s *luSocket) read(ctx context.Context, out chan<- receivedLU) {
	go s.readDstOpts(ctx, out)
	buf := make([]byte, 1500)
	oob := make([]byte, 512)
	for {
		n, oobn, _, from, err := s.conn.ReadMsgIP(buf, oob)
		if err != nil {
			if errors.Is(err, net.ErrClosed) || ctx.Err() != nil {
				return
			}
			continue
		}
		// The kernel stamps CLOCK_REALTIME; the offset to CLOCK_MONOTONIC is read now, once
		// per packet, so a clock step between two LUs moves neither.
		offset := time.Now().UnixNano() - timeline.Now()
		src, _ := netip.AddrFromSlice(from.IP)
		r := parseLUControl(oob[:oobn], offset)
		if r.dstopts {
			continue // readDstOpts has it
		}
		r.src = src.Unmap()
		r.size = n
		r.peer, r.err = parseLU(buf[:n], r.src, r.dst)
		r.update = r.peer.Update
		select {
		case out <- r:
		case <-ctx.Done():
			return
		}
	}
}

// parseLUControl reads the destination address and arrival interface (IPV6_PKTINFO), the
// datapath-verified nonce (IPV6_DSTOPTS) and the arrival stamp (SCM_TIMESTAMPNS, CLOCK_REALTIME,
// moved onto CLOCK_MONOTONIC by subtracting realMinusMono) from a received LU's control messages.
func parseLUControl(oob []byte, realMinusMono int64) receivedLU {
	r := receivedLU{nonceErr: errors.New("no Destination Options header")}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		r.nonceErr = fmt.Errorf("control messages: %w", err)
		return r
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_TIMESTAMPNS &&
			len(m.Data) >= 16 {
			sec := int64(binary.NativeEndian.Uint64(m.Data[0:8]))
			nsec := int64(binary.NativeEndian.Uint64(m.Data[8:16]))
			if at := sec*1e9 + nsec - realMinusMono; at > 0 {
				r.at = at
			}
			continue
		}
		if m.Header.Level != unix.IPPROTO_IPV6 {
			continue
		}
		switch m.Header.Type {
		case unix.IPV6_PKTINFO:
			if len(m.Data) >= unix.SizeofInet6Pktinfo {
				r.dst = netip.AddrFrom16([16]byte(m.Data[:16]))
				r.ifindex = int(binary.NativeEndian.Uint32(m.Data[16:20]))
			}
		case unix.IPV6_DSTOPTS:
			r.dstopts = true
			r.nonce, r.nonceErr = wire.LocallyVerifiedNonce(m.Data)
		}
	}
	return r
}

// parseLU parses an LU in any known layout (wire.ParsePeerLU). IPv4 locators
// (internal/encap) are checked here too: an entry in 0000::/16 that is no IPv4 endpoint makes
// the LU malformed.
func parseLU(msg []byte, src, dst netip.Addr) (wire.PeerLU, error) {
	p, err := wire.ParsePeerLU(msg, src, dst)
	if err != nil {
		return wire.PeerLU{}, err
	}
	if _, err := encap.SplitLocators(p.Update.Locators); err != nil {
		return wire.PeerLU{}, fmt.Errorf("locator update: %w", err)
	}
	return p, nil
}

func addrOf(a *net.IPAddr) netip.Addr {
	if a == nil {
		return netip.Addr{}
	}
	ip, _ := netip.AddrFromSlice(a.IP)
	return ip.Unmap()
}

func setSockoptInt(conn *net.IPConn, level, opt, value int) error {
	raw, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), level, opt, value) }); err != nil {
		return err
	}
	return serr
}
