package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// ICMPv6TypeLocatorUpdate is the ICMPv6 type of the ILNPv6 Locator Update
// message (RFC 6743 s.2).
const ICMPv6TypeLocatorUpdate = 156

// Operation is the Locator Update Operation field (RFC 6743 s.2).
type Operation uint8

// Locator Update operations (RFC 6743 s.2).
const (
	OpAdvertisement   Operation = 1
	OpAcknowledgement Operation = 2
)

func (o Operation) String() string {
	switch o {
	case OpAdvertisement:
		return "advertisement"
	case OpAcknowledgement:
		return "acknowledgement"
	}
	return fmt.Sprintf("operation(%d)", uint8(o))
}

const (
	luHeaderLen = 8  // type, code, checksum, num of locs, operation, reserved
	luEntryLen  = 12 // locator 64, preference 16, lifetime 16
	luMaxPad    = 7  // trailing bytes tolerated on receive, see ParseLocatorUpdate
)

// LocatorEntry is one locator of a Locator Update (RFC 6743 s.2). For L64
// locators a lower Preference value is more preferred (RFC 6742 s.2.3, the
// L64 RR Preference field). Lifetime is in seconds.
type LocatorEntry struct {
	Locator    L64
	Preference uint16
	Lifetime   uint16
}

// LocatorUpdate is an ICMPv6 Locator Update message (RFC 6743 s.2).
type LocatorUpdate struct {
	Op       Operation
	Locators []LocatorEntry
}

// Ack returns the acknowledgement of lu: the same locator list with Op set to
// OpAcknowledgement (RFC 6743 s.2). The list is copied.
func (lu LocatorUpdate) Ack() LocatorUpdate {
	return LocatorUpdate{
		Op:       OpAcknowledgement,
		Locators: append([]LocatorEntry(nil), lu.Locators...),
	}
}

// Marshal returns the whole ICMPv6 message in the RFC 6743 s.2 form (code 0,
// Operation in byte 5, no padding) with the ICMPv6 checksum over the IPv6
// pseudo-header of src and dst (RFC 4443 s.2.3). It rejects an empty or
// over-long (>255) locator list, an unknown Op and non-IPv6 addresses.
func (lu LocatorUpdate) Marshal(src, dst netip.Addr) ([]byte, error) {
	if err := checkLUAddrs(src, dst); err != nil {
		return nil, fmt.Errorf("marshal locator update: %w", err)
	}
	if lu.Op != OpAdvertisement && lu.Op != OpAcknowledgement {
		return nil, fmt.Errorf("marshal locator update: unknown %v", lu.Op)
	}
	n := len(lu.Locators)
	if n == 0 || n > 255 {
		return nil, fmt.Errorf("marshal locator update: %d locators, want 1 to 255", n)
	}
	msg := make([]byte, luHeaderLen, luHeaderLen+n*luEntryLen)
	msg[0] = ICMPv6TypeLocatorUpdate
	msg[4] = uint8(n)
	msg[5] = uint8(lu.Op)
	for _, e := range lu.Locators {
		msg = binary.BigEndian.AppendUint64(msg, uint64(e.Locator))
		msg = binary.BigEndian.AppendUint16(msg, e.Preference)
		msg = binary.BigEndian.AppendUint16(msg, e.Lifetime)
	}
	binary.BigEndian.PutUint16(msg[2:4], PseudoHeaderChecksum(src, dst, ProtoICMPv6, msg))
	return msg, nil
}

func checkLUAddrs(src, dst netip.Addr) error {
	if !src.Is6() || src.Is4In6() {
		return fmt.Errorf("source %v is not IPv6", src)
	}
	if !dst.Is6() || dst.Is4In6() {
		return fmt.Errorf("destination %v is not IPv6", dst)
	}
	return nil
}

// LUParseOptions switches on receive compatibility that is off by default.
type LUParseOptions struct {
	// ZeroLocatorChecksum also accepts an ICMPv6 checksum computed with the
	// upper 64 bits (the locators) of both pseudo-header addresses zeroed, as
	// the St Andrews Linux ILNP code sends (ilnp-public-1 net/ipv6/ilnp6.c
	// send_lu). Off, only the RFC 4443 checksum over the real addresses is
	// accepted.
	ZeroLocatorChecksum bool
}

// LUQuirks records which receive liberalities ParseLocatorUpdateQuirks used.
type LUQuirks uint8

// Receive liberalities.
const (
	// QuirkOpInCode: Operation carried in the Code field, byte 5 zero (the
	// St Andrews build at ilnp-public-1 commit 96efc65 only).
	QuirkOpInCode LUQuirks = 1 << iota
	// QuirkTrailingPad: 1 to 7 bytes after the last 12-byte entry. No
	// implementation pads a message: the 4 bytes the 96efc65 St Andrews build
	// sends after 12 are the tail padding of its 16-byte struct lu_data entry
	// (see peerlu.go), which this reading takes for padding.
	QuirkTrailingPad
	// QuirkZeroLocatorChecksum: checksum valid only with locators zeroed.
	QuirkZeroLocatorChecksum
)

// ParseLocatorUpdate parses and verifies a whole ICMPv6 Locator Update
// message received from src to dst. See ParseLocatorUpdateQuirks.
func ParseLocatorUpdate(msg []byte, src, dst netip.Addr, opts LUParseOptions) (LocatorUpdate, error) {
	lu, _, err := ParseLocatorUpdateQuirks(msg, src, dst, opts)
	return lu, err
}

// ParseLocatorUpdateQuirks is ParseLocatorUpdate that also reports which
// deviations from the RFC 6743 s.2 form it accepted.
//
// The RFC form is type 156, code 0, Num of Locs >= 1, Operation 1 or 2 in
// byte 5, a zero reserved field and exactly Num of Locs 12-byte entries.
// This parser reads only 12-byte entries; ParsePeerLU (peerlu.go) knows the
// layouts the other implementations really send and is what the daemon uses.
// The liberal forms accepted here are the St Andrews build at ilnp-public-1
// commit 96efc65 read as 12-byte entries:
//   - the Operation in the Code field (1 or 2) with byte 5 zero;
//   - up to 7 bytes after the last entry (that build's 16-byte entry is 12
//     bytes of fields and 4 of struct padding);
//   - with opts.ZeroLocatorChecksum only, a checksum computed with both
//     locators zeroed.
//
// The St Andrews build at commit 61f77af does not put the Operation in the
// Code field: it puts it in byte 5 with code 0, as the RFC text does, and its
// 16-byte entry holds 32-bit little-endian preference and lifetime, which
// this parser would misread; FreeBSD ILNP writes the RFC form.
//
// Erratum 5911 to RFC 6743 (status "Reported", i.e. not verified) says the
// Operation field of the s.2 layout is not defined or used and that byte 5
// should be RESERVED, as the RFC's own example message shows it. Wireshark
// 4.0 dissects byte 5 as "Reserved" accordingly. Every public implementation
// nonetheless reads and writes byte 5 as the Operation except the 96efc65
// St Andrews build (Code field). So this parser takes the Operation from
// byte 5 (RFC text) or, when byte 5 is zero, from the Code field, and
// Marshal always sends the RFC text form (code 0, Operation in byte 5).
//
// The reserved field (bytes 6-7) is ignored on receive, as reserved fields
// are in ICMPv6 (RFC 4443 s.2.1).
func ParseLocatorUpdateQuirks(msg []byte, src, dst netip.Addr, opts LUParseOptions) (LocatorUpdate, LUQuirks, error) {
	var q LUQuirks
	if err := checkLUAddrs(src, dst); err != nil {
		return LocatorUpdate{}, 0, fmt.Errorf("locator update: %w", err)
	}
	if len(msg) < luHeaderLen+luEntryLen {
		return LocatorUpdate{}, 0, fmt.Errorf("locator update: %d bytes, want at least %d", len(msg), luHeaderLen+luEntryLen)
	}
	if msg[0] != ICMPv6TypeLocatorUpdate {
		return LocatorUpdate{}, 0, fmt.Errorf("locator update: ICMPv6 type %d, want %d", msg[0], ICMPv6TypeLocatorUpdate)
	}
	code, opByte := msg[1], msg[5]
	var op Operation
	switch {
	case code == 0:
		op = Operation(opByte)
	case opByte == 0:
		op = Operation(code)
		q |= QuirkOpInCode
	default:
		return LocatorUpdate{}, 0, fmt.Errorf("locator update: both code (%d) and operation (%d) set", code, opByte)
	}
	if op != OpAdvertisement && op != OpAcknowledgement {
		return LocatorUpdate{}, 0, fmt.Errorf("locator update: unknown %v", op)
	}
	n := int(msg[4])
	if n == 0 {
		return LocatorUpdate{}, 0, errors.New("locator update: Num of Locs is 0")
	}
	want := luHeaderLen + n*luEntryLen
	switch extra := len(msg) - want; {
	case extra < 0:
		return LocatorUpdate{}, 0, fmt.Errorf("locator update: %d locators need %d bytes, have %d", n, want, len(msg))
	case extra > luMaxPad:
		return LocatorUpdate{}, 0, fmt.Errorf("locator update: %d bytes after %d locators, at most %d pad bytes allowed", extra, n, luMaxPad)
	case extra > 0:
		q |= QuirkTrailingPad
	}
	if PseudoHeaderChecksum(src, dst, ProtoICMPv6, msg) != 0 {
		if !opts.ZeroLocatorChecksum {
			return LocatorUpdate{}, 0, errors.New("locator update: bad ICMPv6 checksum")
		}
		if PseudoHeaderChecksum(zeroLocator(src), zeroLocator(dst), ProtoICMPv6, msg) != 0 {
			return LocatorUpdate{}, 0, errors.New("locator update: bad ICMPv6 checksum (also with locators zeroed)")
		}
		q |= QuirkZeroLocatorChecksum
	}
	lu := LocatorUpdate{Op: op, Locators: make([]LocatorEntry, n)}
	for i := range lu.Locators {
		e := msg[luHeaderLen+i*luEntryLen:]
		lu.Locators[i] = LocatorEntry{
			Locator:    L64(binary.BigEndian.Uint64(e[0:8])),
			Preference: binary.BigEndian.Uint16(e[8:10]),
			Lifetime:   binary.BigEndian.Uint16(e[10:12]),
		}
	}
	return lu, q, nil
}

// zeroLocator returns a with its upper 64 bits cleared, keeping the NID.
func zeroLocator(a netip.Addr) netip.Addr {
	b := a.As16()
	clear(b[:8])
	return netip.AddrFrom16(b)
}
