package analysis

// MIPv6Sizes are the on-the-wire sizes in bytes of the MIPv6 signalling
// messages.
type MIPv6Sizes struct {
	BUHA, BAckHA int // binding update to / acknowledgement from the HA
	HoTI, HoT    int // home test init / home test
	CoTI, CoT    int // care-of test init / care-of test
	BUCN, BAckCN int // binding update to / acknowledgement from the CN
}

// ThesisMIPv6Sizes are the tcpdump sizes of §6.4.1: BU_HA = HoTI = BU_CN =
// BAck_CN = 110, BAck_HA = 94, HoT = 118, CoTI = 70, CoT = 78 bytes.
func ThesisMIPv6Sizes() MIPv6Sizes {
	return MIPv6Sizes{BUHA: 110, BAckHA: 94, HoTI: 110, HoT: 118, CoTI: 70, CoT: 78, BUCN: 110, BAckCN: 110}
}

// home is BU_HA + BAck_HA, 204 bytes with the thesis's sizes.
func (s MIPv6Sizes) home() int { return s.BUHA + s.BAckHA }

// perCN is HoTI + HoT + CoTI + CoT + BU_CN + BAck_CN, 596 bytes with the
// thesis's sizes (eq. 48).
func (s MIPv6Sizes) perCN() int { return s.HoTI + s.HoT + s.CoTI + s.CoT + s.BUCN + s.BAckCN }

// ILNPSizes are the on-the-wire sizes in bytes of LU and LU-ACK.
type ILNPSizes struct {
	LU, LUAck int
}

// ThesisILNPSizes are the tcpdump sizes of §6.4.1: LU = LU-ACK = 86 bytes.
func ThesisILNPSizes() ILNPSizes { return ILNPSizes{LU: 86, LUAck: 86} }

// LUWire describes how our LU is laid out on the wire, to compute its size
// without a capture. Assumption (stated in the report): an IPv6 header, one
// Destination Options header carrying only the nonce option (RFC 6744: 2
// bytes of header + 2 of option type/length + the nonce, padded to 8), the
// 8-byte ICMPv6 Locator Update header (RFC 6743 s. 2: type, code, checksum,
// Num of Locs, Operation, reserved) and 12 bytes per locator (Locator 8,
// Preference 2, Lifetime 2). The LU-ACK is the advertisement with only the
// Operation changed, so it has the same size. LinkHeader is 0 for IP-layer
// sizes; set 14 to count Ethernet framing as tcpdump shows it.
type LUWire struct {
	LinkHeader int // bytes below IPv6, 0 for IP-layer sizes
	IPv6Header int // 40
	NonceLen   int // 4 or 12 (RFC 6744 s. 2)
	ICMPHeader int // 8
	PerLocator int // 12
	Locators   int // locators listed; a soft handoff lists old and new
}

// DefaultLUWire is our LU with a 4-byte nonce and one locator at the IP layer:
// 40 + 8 + 8 + 12 = 68 bytes.
func DefaultLUWire() LUWire {
	return LUWire{LinkHeader: 0, IPv6Header: 40, NonceLen: 4, ICMPHeader: 8, PerLocator: 12, Locators: 1}
}

// NonceOptionHeader is the size of a Destination Options header holding only
// the nonce option: (2 + 2 + nonce) rounded up to a multiple of 8 (RFC 8200
// s. 4.6), 8 bytes for a 4-byte nonce and 16 for a 12-byte one.
func (w LUWire) NonceOptionHeader() int {
	n := 2 + 2 + w.NonceLen
	return (n + 7) / 8 * 8
}

// Size is the LU's length in bytes.
func (w LUWire) Size() int {
	return w.LinkHeader + w.IPv6Header + w.NonceOptionHeader() + w.ICMPHeader + w.PerLocator*w.Locators
}

// Sizes is the ILNPSizes of an LU and its identical-size LU-ACK.
func (w LUWire) Sizes() ILNPSizes { return ILNPSizes{LU: w.Size(), LUAck: w.Size()} }

// Overhead is the signalling one simultaneous handoff puts on the network.
type Overhead struct {
	Packets int
	Bytes   int
}

// MIPv6NoROOverhead is eqs. 41-44: each MN sends a BU to its HA and gets a
// BAck; correspondents play no part. Packets = 2·MN, bytes = 204·MN.
func MIPv6NoROOverhead(mns int, s MIPv6Sizes) Overhead {
	return Overhead{Packets: 2 * mns, Bytes: mns * s.home()}
}

// MIPv6ROOverhead is eqs. 45-48: the home binding plus, per CN, return
// routability and a binding to the CN. Packets = MN·(2 + 6·CN), bytes =
// MN·(204 + 596·CN).
func MIPv6ROOverhead(mns, cns int, s MIPv6Sizes) Overhead {
	return Overhead{Packets: mns * (2 + 6*cns), Bytes: mns * (s.home() + cns*s.perCN())}
}

// ILNPv6Overhead is eqs. 49-52: one LU and one LU-ACK per MN-CN pair.
// Packets = 2·MN·CN, bytes = 172·MN·CN with the thesis's sizes.
func ILNPv6Overhead(mns, cns int, s ILNPSizes) Overhead {
	return Overhead{Packets: 2 * mns * cns, Bytes: mns * cns * (s.LU + s.LUAck)}
}
