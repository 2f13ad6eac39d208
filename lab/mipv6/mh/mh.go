// Package mh holds the Mobile IPv6 wire formats (RFC 6275 s.6) for the lab's MIPv6 baseline:
// the Mobility Header (IPv6 protocol 135) with its messages and mobility options, the Home
// Address destination option, the type 2 Routing header, and whole IPv6 packets carrying them.
//
// The package is pure (no I/O, no global state); parsers return an *Error wrapping a sentinel
// for bad input and never panic.
package mh

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"time"

	"ilnp/internal/wire"
)

// Protocol numbers (IANA).
const (
	// Proto is the IPv6 Next Header value of the Mobility Header.
	Proto = 135
	// ProtoNone is IPPROTO_NONE, the Payload Proto every Mobility Header carries (RFC 6275
	// s.6.1.1: no payload follows).
	ProtoNone = 59
	// ProtoRouting is the IPv6 Next Header value of a Routing header.
	ProtoRouting = 43
	// ProtoDestOpts is the IPv6 Next Header value of a Destination Options header.
	ProtoDestOpts = 60
	// ProtoIPv6 is IPv6-in-IPv6 (RFC 2473), the HA <-> MN tunnel.
	ProtoIPv6 = 41
)

// headerLen is the common part of every Mobility Header: Payload Proto, Header Len, MH Type,
// Reserved, Checksum (RFC 6275 s.6.1.1).
const headerLen = 6

// Type is the MH Type field.
type Type uint8

// MH types of RFC 6275 s.6.1.2 - s.6.1.9.
const (
	TypeBindingRefreshRequest Type = 0
	TypeHomeTestInit          Type = 1
	TypeCareOfTestInit        Type = 2
	TypeHomeTest              Type = 3
	TypeCareOfTest            Type = 4
	TypeBindingUpdate         Type = 5
	TypeBindingAck            Type = 6
	TypeBindingError          Type = 7
)

func (t Type) String() string {
	switch t {
	case TypeBindingRefreshRequest:
		return "BRR"
	case TypeHomeTestInit:
		return "HoTI"
	case TypeCareOfTestInit:
		return "CoTI"
	case TypeHomeTest:
		return "HoT"
	case TypeCareOfTest:
		return "CoT"
	case TypeBindingUpdate:
		return "BU"
	case TypeBindingAck:
		return "BAck"
	case TypeBindingError:
		return "BE"
	}
	return fmt.Sprintf("MH(%d)", uint8(t))
}

// fixedLen is the message data each type carries before its mobility options.
func (t Type) fixedLen() (int, bool) {
	switch t {
	case TypeBindingRefreshRequest:
		return 2, true // Reserved
	case TypeHomeTestInit, TypeCareOfTestInit:
		return 10, true // Reserved, Init Cookie
	case TypeHomeTest, TypeCareOfTest:
		return 18, true // Nonce Index, Init Cookie, Keygen Token
	case TypeBindingUpdate:
		return 6, true // Sequence, flags, Lifetime
	case TypeBindingAck:
		return 6, true // Status, K|Reserved, Sequence, Lifetime
	case TypeBindingError:
		return 18, true // Status, Reserved, Home Address
	}
	return 0, false
}

// Cookie is a 64-bit Home or Care-of Init Cookie (RFC 6275 s.6.1.3).
type Cookie [8]byte

// Token is a 64-bit Home or Care-of Keygen Token (RFC 6275 s.5.2.5).
type Token [8]byte

// Status is the Binding Acknowledgement status (RFC 6275 s.6.1.8); values below 128 accept.
type Status uint8

// Binding Acknowledgement status codes.
const (
	StatusAccepted                  Status = 0
	StatusAcceptedPrefixDiscovery   Status = 1
	StatusUnspecified               Status = 128
	StatusProhibited                Status = 129
	StatusInsufficientResources     Status = 130
	StatusHomeRegNotSupported       Status = 131
	StatusNotHomeSubnet             Status = 132
	StatusNotHomeAgent              Status = 133
	StatusDADFailed                 Status = 134
	StatusSeqOutOfWindow            Status = 135
	StatusExpiredHomeNonceIndex     Status = 136
	StatusExpiredCareOfNonceIndex   Status = 137
	StatusExpiredNonces             Status = 138
	StatusRegistrationTypeForbidden Status = 139
)

// Accepted reports whether the status accepts the binding.
func (s Status) Accepted() bool { return s < 128 }

func (s Status) String() string {
	names := map[Status]string{
		0: "accepted", 1: "accepted, prefix discovery necessary", 128: "reason unspecified",
		129: "administratively prohibited", 130: "insufficient resources",
		131: "home registration not supported", 132: "not home subnet",
		133: "not home agent for this mobile node", 134: "duplicate address detection failed",
		135: "sequence number out of window", 136: "expired home nonce index",
		137: "expired care-of nonce index", 138: "expired nonces",
		139: "registration type change disallowed",
	}
	if n, ok := names[s]; ok {
		return n
	}
	return fmt.Sprintf("status %d", uint8(s))
}

// Binding Error status codes (RFC 6275 s.6.1.9).
const (
	ErrorStatusUnknownHAO    uint8 = 1 // unknown binding for Home Address destination option
	ErrorStatusUnknownMHType uint8 = 2 // unrecognized MH Type value
)

// LifetimeUnit is the granularity of Lifetime and Refresh Interval fields (RFC 6275 s.6.1.7).
const LifetimeUnit = 4 * time.Second

// LifetimeUnits converts d to 4-second units, rounding down and saturating at 0xffff.
func LifetimeUnits(d time.Duration) uint16 {
	if d <= 0 {
		return 0
	}
	u := d / LifetimeUnit
	if u > 0xffff {
		return 0xffff
	}
	return uint16(u)
}

// LifetimeDuration converts 4-second units to a duration.
func LifetimeDuration(units uint16) time.Duration { return time.Duration(units) * LifetimeUnit }

// Message is one Mobility Header message: *BindingUpdate, *BindingAck, ...
type Message interface {
	Type() Type
	// MobilityOptions returns the message's options (padding excluded).
	MobilityOptions() []Option
	appendFixed(b []byte) []byte
}

// BindingRefreshRequest (MH type 0, RFC 6275 s.6.1.2).
type BindingRefreshRequest struct {
	Options []Option
}

// HomeTestInit (MH type 1, RFC 6275 s.6.1.3).
type HomeTestInit struct {
	Cookie  Cookie
	Options []Option
}

// CareOfTestInit (MH type 2, RFC 6275 s.6.1.4).
type CareOfTestInit struct {
	Cookie  Cookie
	Options []Option
}

// HomeTest (MH type 3, RFC 6275 s.6.1.5).
type HomeTest struct {
	NonceIndex uint16
	Cookie     Cookie
	Token      Token
	Options    []Option
}

// CareOfTest (MH type 4, RFC 6275 s.6.1.6).
type CareOfTest struct {
	NonceIndex uint16
	Cookie     Cookie
	Token      Token
	Options    []Option
}

// BindingUpdate (MH type 5, RFC 6275 s.6.1.7).
type BindingUpdate struct {
	Seq uint16
	// Ack (A) asks for a Binding Acknowledgement; Home (H) asks the receiver to act as home
	// agent; LinkLocal (L): the home address's interface identifier equals the link-local
	// one; KeyMgmt (K): IKE state survives movement.
	Ack, Home, LinkLocal, KeyMgmt bool
	// Lifetime in 4-second units; 0 deletes the binding.
	Lifetime uint16
	Options  []Option
}

// BU flag bits in the 16-bit word after the sequence number.
const (
	buFlagA = 0x8000
	buFlagH = 0x4000
	buFlagL = 0x2000
	buFlagK = 0x1000
)

// BindingAck (MH type 6, RFC 6275 s.6.1.8).
type BindingAck struct {
	Status  Status
	KeyMgmt bool
	Seq     uint16
	// Lifetime granted, in 4-second units.
	Lifetime uint16
	Options  []Option
}

// BindingError (MH type 7, RFC 6275 s.6.1.9).
type BindingError struct {
	Status      uint8
	HomeAddress netip.Addr
	Options     []Option
}

func (*BindingRefreshRequest) Type() Type { return TypeBindingRefreshRequest }
func (*HomeTestInit) Type() Type          { return TypeHomeTestInit }
func (*CareOfTestInit) Type() Type        { return TypeCareOfTestInit }
func (*HomeTest) Type() Type              { return TypeHomeTest }
func (*CareOfTest) Type() Type            { return TypeCareOfTest }
func (*BindingUpdate) Type() Type         { return TypeBindingUpdate }
func (*BindingAck) Type() Type            { return TypeBindingAck }
func (*BindingError) Type() Type          { return TypeBindingError }

func (m *BindingRefreshRequest) MobilityOptions() []Option { return m.Options }
func (m *HomeTestInit) MobilityOptions() []Option          { return m.Options }
func (m *CareOfTestInit) MobilityOptions() []Option        { return m.Options }
func (m *HomeTest) MobilityOptions() []Option              { return m.Options }
func (m *CareOfTest) MobilityOptions() []Option            { return m.Options }
func (m *BindingUpdate) MobilityOptions() []Option         { return m.Options }
func (m *BindingAck) MobilityOptions() []Option            { return m.Options }
func (m *BindingError) MobilityOptions() []Option          { return m.Options }

func (m *BindingRefreshRequest) appendFixed(b []byte) []byte { return append(b, 0, 0) }
func (m *HomeTestInit) appendFixed(b []byte) []byte          { return append(append(b, 0, 0), m.Cookie[:]...) }
func (m *CareOfTestInit) appendFixed(b []byte) []byte        { return append(append(b, 0, 0), m.Cookie[:]...) }

func (m *HomeTest) appendFixed(b []byte) []byte {
	b = binary.BigEndian.AppendUint16(b, m.NonceIndex)
	return append(append(b, m.Cookie[:]...), m.Token[:]...)
}

func (m *CareOfTest) appendFixed(b []byte) []byte {
	b = binary.BigEndian.AppendUint16(b, m.NonceIndex)
	return append(append(b, m.Cookie[:]...), m.Token[:]...)
}

func (m *BindingUpdate) appendFixed(b []byte) []byte {
	var flags uint16
	if m.Ack {
		flags |= buFlagA
	}
	if m.Home {
		flags |= buFlagH
	}
	if m.LinkLocal {
		flags |= buFlagL
	}
	if m.KeyMgmt {
		flags |= buFlagK
	}
	b = binary.BigEndian.AppendUint16(b, m.Seq)
	b = binary.BigEndian.AppendUint16(b, flags)
	return binary.BigEndian.AppendUint16(b, m.Lifetime)
}

func (m *BindingAck) appendFixed(b []byte) []byte {
	var k byte
	if m.KeyMgmt {
		k = 0x80
	}
	b = append(b, byte(m.Status), k)
	b = binary.BigEndian.AppendUint16(b, m.Seq)
	return binary.BigEndian.AppendUint16(b, m.Lifetime)
}

func (m *BindingError) appendFixed(b []byte) []byte {
	a := m.HomeAddress.As16()
	return append(append(b, m.Status, 0), a[:]...)
}

// Marshal encodes m as a Mobility Header whose checksum covers the pseudo-header with src and
// dst. Pass the pseudo-header addresses, not necessarily the IPv6 header's: with a Home
// Address option the source is the home address, with a type 2 routing header the destination
// is the home address (RFC 6275 s.6.1.1; Envelope.PseudoSrc/PseudoDst compute them).
// Padding is inserted to meet each option's alignment and to end on 8 octets.
func Marshal(m Message, src, dst netip.Addr) ([]byte, error) {
	b, err := marshalZeroChecksum(m)
	if err != nil {
		return nil, err
	}
	setChecksum(b, src, dst)
	return b, nil
}

// marshalZeroChecksum encodes m with the checksum field zero.
func marshalZeroChecksum(m Message) ([]byte, error) {
	if m == nil {
		return nil, errAt("marshal", -1, ErrInvalid, "nil message")
	}
	if be, ok := m.(*BindingError); ok && !be.HomeAddress.Is6() {
		return nil, errAt("marshal BE", -1, ErrBadAddress, "home address %v", be.HomeAddress)
	}
	b := []byte{ProtoNone, 0, byte(m.Type()), 0, 0, 0}
	b = m.appendFixed(b)
	b, err := appendOptions(b, m.MobilityOptions())
	if err != nil {
		return nil, err
	}
	if len(b)%8 != 0 || len(b) > 8*256 {
		return nil, errAt("marshal "+m.Type().String(), -1, ErrLength, "%d bytes", len(b))
	}
	b[1] = byte(len(b)/8 - 1)
	return b, nil
}

func setChecksum(b []byte, src, dst netip.Addr) {
	b[4], b[5] = 0, 0
	binary.BigEndian.PutUint16(b[4:6], wire.PseudoHeaderChecksum(src, dst, Proto, b))
}

// Header is the common part of a parsed Mobility Header.
type Header struct {
	Type     Type
	Checksum uint16
	// Length is the whole Mobility Header in bytes, (Header Len + 1) * 8.
	Length int
}

// Parse decodes the Mobility Header b (exactly the header's bytes) and verifies its checksum
// against the pseudo-header addresses src and dst (see Marshal).
//
// The checksum is verified once the header's length is known and before anything else, so a
// corrupted header is reported as ErrChecksum (and never answered with a Binding Error).
func Parse(b []byte, src, dst netip.Addr) (Message, error) {
	if err := frame(b); err != nil {
		return nil, err
	}
	if c := wire.PseudoHeaderChecksum(src, dst, Proto, b); c != 0 {
		return nil, errAt("MH", 4, ErrChecksum, "stored %#04x, residue %#04x for %v -> %v",
			binary.BigEndian.Uint16(b[4:6]), c, src, dst)
	}
	return ParseUnchecked(b)
}

// ParseHeader checks the common header of b and returns it.
func ParseHeader(b []byte) (Header, error) { return parseHeader(b) }

// frame checks that b holds exactly one Mobility Header according to its Header Len.
func frame(b []byte) error {
	if len(b) < 8 {
		return errAt("MH", 0, ErrTruncated, "%d bytes, the smallest header is 8", len(b))
	}
	n := (int(b[1]) + 1) * 8
	if n > len(b) {
		return errAt("MH", 1, ErrTruncated, "header len says %d bytes, %d present", n, len(b))
	}
	if n != len(b) {
		return errAt("MH", n, ErrLength, "%d bytes after the %d-byte header", len(b)-n, n)
	}
	return nil
}

func parseHeader(b []byte) (Header, error) {
	if err := frame(b); err != nil {
		return Header{}, err
	}
	n := len(b)
	if b[0] != ProtoNone {
		return Header{}, errAt("MH", 0, ErrPayloadProto, "payload proto %d", b[0])
	}
	t := Type(b[2])
	fixed, ok := t.fixedLen()
	if !ok {
		return Header{}, errAt("MH", 2, ErrUnknownType, "type %d", b[2])
	}
	if headerLen+fixed > n {
		return Header{}, errAt(t.String(), 1, ErrTooShort, "%d bytes, type needs %d", n, headerLen+fixed)
	}
	return Header{Type: t, Checksum: binary.BigEndian.Uint16(b[4:6]), Length: n}, nil
}

// ParseUnchecked decodes b like Parse without verifying the checksum (for callers that
// verified it already, or captures where the pseudo-header is unknown).
func ParseUnchecked(b []byte) (Message, error) {
	h, err := parseHeader(b)
	if err != nil {
		return nil, err
	}
	fixed, _ := h.Type.fixedLen()
	d := b[headerLen : headerLen+fixed]
	opts, err := parseOptions(b, headerLen+fixed)
	if err != nil {
		return nil, err
	}
	switch h.Type {
	case TypeBindingRefreshRequest:
		return &BindingRefreshRequest{Options: opts}, nil
	case TypeHomeTestInit:
		return &HomeTestInit{Cookie: Cookie(d[2:10]), Options: opts}, nil
	case TypeCareOfTestInit:
		return &CareOfTestInit{Cookie: Cookie(d[2:10]), Options: opts}, nil
	case TypeHomeTest:
		return &HomeTest{NonceIndex: binary.BigEndian.Uint16(d), Cookie: Cookie(d[2:10]),
			Token: Token(d[10:18]), Options: opts}, nil
	case TypeCareOfTest:
		return &CareOfTest{NonceIndex: binary.BigEndian.Uint16(d), Cookie: Cookie(d[2:10]),
			Token: Token(d[10:18]), Options: opts}, nil
	case TypeBindingUpdate:
		f := binary.BigEndian.Uint16(d[2:4])
		return &BindingUpdate{
			Seq: binary.BigEndian.Uint16(d), Ack: f&buFlagA != 0, Home: f&buFlagH != 0,
			LinkLocal: f&buFlagL != 0, KeyMgmt: f&buFlagK != 0,
			Lifetime: binary.BigEndian.Uint16(d[4:6]), Options: opts,
		}, nil
	case TypeBindingAck:
		return &BindingAck{
			Status: Status(d[0]), KeyMgmt: d[1]&0x80 != 0, Seq: binary.BigEndian.Uint16(d[2:4]),
			Lifetime: binary.BigEndian.Uint16(d[4:6]), Options: opts,
		}, nil
	default: // TypeBindingError; parseHeader rejected every other type
		return &BindingError{Status: d[0], HomeAddress: netip.AddrFrom16([16]byte(d[2:18])),
			Options: opts}, nil
	}
}
