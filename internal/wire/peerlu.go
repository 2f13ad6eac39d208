package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// Locator Updates as the other public ILNPv6 implementations write them.
//
// FreeBSD ILNP (github.com/ilnp/ilnp-freebsd14, sys/netinet6/ilnp6.c lu_output, and
// sys/netinet6/icmp6.c icmp6_input for the ACK) writes the RFC 6743 s.2 layout: 12-byte
// entries, Operation in byte 5, code 0, every valid local locator listed, the checksum over
// the real addresses (in6_cksum). Its LU-ACK is the received LU reflected (icmp6_reflect) with
// byte 5 set to 2.
//
// The St Andrews Linux 4.9 patch (github.com/ilnp/ilnp-public-1, net/ipv6/ilnp6.c send_lu)
// sends one locator per LU in an entry of the C struct lu_data, which the 8-byte alignment of
// its uint64_t locator makes 16 bytes long. Two builds of it are public:
//   - at commit 61f77af (include/net/ilnp6.h: lu_data = u64 locator, u32 preference, u32
//     lifetime) the fields are stored without byte swapping, so in the host order of the x86
//     machines it ran on (little-endian), and the Operation is in byte 5 (un_data8[1]) with
//     code 0: LayoutStAndrews;
//   - at commit 96efc65 the Operation is in the Code field with byte 5 zero, preference and
//     lifetime are 16-bit in network order (htons) and the last 4 bytes of the 16-byte entry
//     are the struct's tail padding, never written (uninitialised skb memory):
//     LayoutStAndrewsCode.
//
// Both compute the ICMPv6 checksum with the upper 64 bits (the locators) of both pseudo-header
// addresses zeroed (send_lu, "so only NID will be used for checksum calculation"). Both reply
// to an LU with an LU of their own layout naming the first locator of the LU they received,
// preference 10 and lifetime 30 (rcv_lu -> send_lu(msg->l64, ..., is_ack=1, nonce_local)),
// addressed to [that locator : sender's NID]; they match an ACK by that locator alone.

// LULayout is the body layout of a Locator Update.
type LULayout uint8

// Layouts seen in public implementations.
const (
	// LayoutRFC6743: RFC 6743 s.2 (this daemon, FreeBSD ILNP).
	LayoutRFC6743 LULayout = iota
	// LayoutStAndrews: one 16-byte entry, 32-bit little-endian preference and lifetime,
	// Operation in byte 5 (ilnp-public-1 at 61f77af).
	LayoutStAndrews
	// LayoutStAndrewsCode: one 16-byte entry, 16-bit network-order preference and lifetime
	// and 4 padding bytes, Operation in the Code field (ilnp-public-1 at 96efc65).
	LayoutStAndrewsCode
)

func (l LULayout) String() string {
	switch l {
	case LayoutRFC6743:
		return "rfc6743"
	case LayoutStAndrews:
		return "standrews"
	case LayoutStAndrewsCode:
		return "standrews-code"
	}
	return fmt.Sprintf("layout(%d)", uint8(l))
}

// LUChecksum is the rule an LU's ICMPv6 checksum was computed by.
type LUChecksum uint8

// Checksum rules.
const (
	// ChecksumFull: over the real addresses (RFC 4443 s.2.3).
	ChecksumFull LUChecksum = iota
	// ChecksumZeroLocators: over the addresses with their upper 64 bits zeroed (St Andrews).
	ChecksumZeroLocators
)

func (c LUChecksum) String() string {
	if c == ChecksumZeroLocators {
		return "zero-locators"
	}
	return "full"
}

// StAndrewsLULen is the length of a St Andrews LU: the 8-byte header and one 16-byte entry.
const StAndrewsLULen = luHeaderLen + 16

// PeerLU is a Locator Update together with the layout and checksum rule it travels in.
type PeerLU struct {
	Update   LocatorUpdate
	Layout   LULayout
	Checksum LUChecksum
}

// ParsePeerLU parses a whole ICMPv6 Locator Update received from src to dst in any of the
// known layouts and reports which one it was and which checksum rule made its checksum valid.
// The layouts do not overlap: an RFC 6743 message is exactly 8 + 12 * Num of Locs bytes with
// code 0, a St Andrews one is 24 bytes with Num of Locs 1 (8 + 12 is 20), and the two St
// Andrews builds differ in where the Operation is. Preference and lifetime above 65535 (the
// 32-bit St Andrews fields) are clamped to 65535.
func ParsePeerLU(msg []byte, src, dst netip.Addr) (PeerLU, error) {
	fail := func(format string, a ...any) (PeerLU, error) {
		return PeerLU{}, fmt.Errorf("locator update: "+format, a...)
	}
	if err := checkLUAddrs(src, dst); err != nil {
		return fail("%v", err)
	}
	if len(msg) < luHeaderLen+luEntryLen {
		return fail("%d bytes, want at least %d", len(msg), luHeaderLen+luEntryLen)
	}
	if msg[0] != ICMPv6TypeLocatorUpdate {
		return fail("ICMPv6 type %d, want %d", msg[0], ICMPv6TypeLocatorUpdate)
	}
	var p PeerLU
	switch {
	case PseudoHeaderChecksum(src, dst, ProtoICMPv6, msg) == 0:
		p.Checksum = ChecksumFull
	case PseudoHeaderChecksum(zeroLocator(src), zeroLocator(dst), ProtoICMPv6, msg) == 0:
		p.Checksum = ChecksumZeroLocators
	default:
		return fail("bad ICMPv6 checksum (also with locators zeroed)")
	}
	code, n, opByte := msg[1], int(msg[4]), msg[5]
	if n == 0 {
		return PeerLU{}, errors.New("locator update: Num of Locs is 0")
	}
	var op Operation
	switch {
	case len(msg) == StAndrewsLULen && n == 1 && code == 0:
		p.Layout, op = LayoutStAndrews, Operation(opByte)
	case len(msg) == StAndrewsLULen && n == 1 && opByte == 0:
		p.Layout, op = LayoutStAndrewsCode, Operation(code)
	case code != 0:
		return fail("code %d, want 0", code)
	default:
		if want := luHeaderLen + n*luEntryLen; len(msg) != want {
			return fail("%d locators need %d bytes, have %d", n, want, len(msg))
		}
		p.Layout, op = LayoutRFC6743, Operation(opByte)
	}
	if op != OpAdvertisement && op != OpAcknowledgement {
		return fail("unknown %v", op)
	}
	p.Update = LocatorUpdate{Op: op, Locators: make([]LocatorEntry, n)}
	e := msg[luHeaderLen:]
	switch p.Layout {
	case LayoutStAndrews:
		p.Update.Locators[0] = LocatorEntry{
			Locator:    L64(binary.BigEndian.Uint64(e[0:8])),
			Preference: clamp16(binary.LittleEndian.Uint32(e[8:12])),
			Lifetime:   clamp16(binary.LittleEndian.Uint32(e[12:16])),
		}
	default: // RFC 6743 and the 96efc65 entry share the first 12 bytes
		for i := range p.Update.Locators {
			b := e[i*luEntryLen:]
			p.Update.Locators[i] = LocatorEntry{
				Locator:    L64(binary.BigEndian.Uint64(b[0:8])),
				Preference: binary.BigEndian.Uint16(b[8:10]),
				Lifetime:   binary.BigEndian.Uint16(b[10:12]),
			}
		}
	}
	return p, nil
}

func clamp16(v uint32) uint16 {
	if v > 0xffff {
		return 0xffff
	}
	return uint16(v)
}

// Marshal writes p in its layout with its checksum rule from src to dst. The St Andrews
// layouts carry exactly one locator; their padding bytes are written as zero.
func (p PeerLU) Marshal(src, dst netip.Addr) ([]byte, error) {
	var msg []byte
	switch p.Layout {
	case LayoutRFC6743:
		b, err := p.Update.Marshal(src, dst)
		if err != nil {
			return nil, err
		}
		msg = b
	case LayoutStAndrews, LayoutStAndrewsCode:
		if err := checkLUAddrs(src, dst); err != nil {
			return nil, fmt.Errorf("marshal locator update: %w", err)
		}
		if op := p.Update.Op; op != OpAdvertisement && op != OpAcknowledgement {
			return nil, fmt.Errorf("marshal locator update: unknown %v", op)
		}
		if len(p.Update.Locators) != 1 {
			return nil, fmt.Errorf("marshal locator update: %v layout carries 1 locator, have %d", p.Layout, len(p.Update.Locators))
		}
		e := p.Update.Locators[0]
		msg = make([]byte, StAndrewsLULen)
		msg[0], msg[4] = ICMPv6TypeLocatorUpdate, 1
		binary.BigEndian.PutUint64(msg[8:16], uint64(e.Locator))
		if p.Layout == LayoutStAndrews {
			msg[5] = uint8(p.Update.Op)
			binary.LittleEndian.PutUint32(msg[16:20], uint32(e.Preference))
			binary.LittleEndian.PutUint32(msg[20:24], uint32(e.Lifetime))
		} else {
			msg[1] = uint8(p.Update.Op)
			binary.BigEndian.PutUint16(msg[16:18], e.Preference)
			binary.BigEndian.PutUint16(msg[18:20], e.Lifetime)
		}
		binary.BigEndian.PutUint16(msg[2:4], PseudoHeaderChecksum(src, dst, ProtoICMPv6, msg))
	default:
		return nil, fmt.Errorf("marshal locator update: unknown %v", p.Layout)
	}
	if p.Checksum == ChecksumZeroLocators {
		msg[2], msg[3] = 0, 0
		binary.BigEndian.PutUint16(msg[2:4], PseudoHeaderChecksum(zeroLocator(src), zeroLocator(dst), ProtoICMPv6, msg))
	}
	return msg, nil
}
