package wire

import "fmt"

// NonceOptionType is the IPv6 option type of the ILNPv6 Nonce option
// (RFC 6744 s.2): act bits 10 (discard and send ICMP Parameter Problem if
// not understood), chg bit 0 (does not change en route).
const NonceOptionType = 0x8B

// VerifiedNonceOptionType marks a nonce this host's own ingress program has checked against the
// session: it rewrites the type byte of a Locator Update's nonce option from 0x8B to this value
// before the kernel sees the packet, so the daemon reads the nonce the packet carried (with
// IPV6_RECVDSTOPTS) instead of trusting that some check happened. 0x1E is an RFC 4727
// experimental option type with act bits 00 (skip if not understood), so the kernel delivers
// the packet. It never leaves the host; one arriving from outside proves nothing: on an ILNP
// interface a Locator Update without the real 0x8B nonce is dropped by the datapath, on any
// other interface the daemon ignores Locator Updates altogether.
const VerifiedNonceOptionType = 0x1E

// IPv6 option types used by the Destination Options parser.
const (
	optPad1    = 0x00 // RFC 8200 s.4.2
	optPadN    = 0x01 // RFC 8200 s.4.2
	optCALIPSO = 0x07 // RFC 5570 s.5
)

// ProtoDestOpts is the IPv6 Next Header value of a Destination Options header.
const ProtoDestOpts = 60

// AppendNonceHeader appends a whole Destination Options header carrying only
// the nonce option: 8 bytes for a 4-byte nonce (Hdr Ext Len 0) or 16 bytes
// for a 12-byte nonce (Hdr Ext Len 1). Both sizes are already multiples of 8,
// so no padding is needed. For the zero Nonce it appends an 8-byte header
// holding only PadN, which is valid IPv6 but carries no nonce.
func AppendNonceHeader(b []byte, nextHeader uint8, n Nonce) []byte {
	if n.n == 0 {
		return append(b, nextHeader, 0, optPadN, 4, 0, 0, 0, 0)
	}
	hdrExtLen := uint8((2+2+int(n.n))/8 - 1)
	b = append(b, nextHeader, hdrExtLen, NonceOptionType, n.n)
	return append(b, n.b[:n.n]...)
}

// DestOpts is a parsed IPv6 Destination Options header.
type DestOpts struct {
	NextHeader uint8
	// Length is the whole header in bytes, (Hdr Ext Len + 1) * 8: the offset
	// of the next header in the buffer given to ParseDestOpts.
	Length   int
	Nonce    Nonce
	HasNonce bool
	// NonceOffset is the offset of the nonce option's type byte within the
	// header (valid when HasNonce).
	NonceOffset int
	// Others lists the types of options other than Pad1, PadN and the nonce,
	// in order (e.g. CALIPSO). The caller applies RFC 8200 s.4.2 act bits.
	Others []uint8
}

// ParseDestOpts parses the Destination Options header at the start of b (b
// may continue with the next header's bytes).
//
// RFC 6744 rules: a packet carries at most one nonce option, so a header
// with two is an error; the nonce option data length must be 4 or 12. The
// nonce belongs first in the header; it is also accepted after padding and
// after a CALIPSO option (RFC 5570), the one option RFC 6744 lets come
// before it. A nonce after any other option is an error. Any option running
// past the end of the header, and a header longer than b, is an error.
func ParseDestOpts(b []byte) (DestOpts, error) {
	if len(b) < 2 {
		return DestOpts{}, fmt.Errorf("destination options: %d bytes, want at least 8", len(b))
	}
	d := DestOpts{NextHeader: b[0], Length: (int(b[1]) + 1) * 8}
	if d.Length > len(b) {
		return DestOpts{}, fmt.Errorf("destination options: Hdr Ext Len %d says %d bytes, have %d", b[1], d.Length, len(b))
	}
	opts := b[2:d.Length]
	off := 2
	for len(opts) > 0 {
		t := opts[0]
		if t == optPad1 {
			opts, off = opts[1:], off+1
			continue
		}
		if len(opts) < 2 {
			return DestOpts{}, fmt.Errorf("destination options: option 0x%02x at offset %d truncated (no length byte)", t, off)
		}
		l := int(opts[1])
		if 2+l > len(opts) {
			return DestOpts{}, fmt.Errorf("destination options: option 0x%02x at offset %d has length %d, overruns the header by %d bytes", t, off, l, 2+l-len(opts))
		}
		data := opts[2 : 2+l]
		switch t {
		case optPadN:
		case NonceOptionType:
			if d.HasNonce {
				return DestOpts{}, fmt.Errorf("destination options: second nonce option at offset %d (RFC 6744 allows one)", off)
			}
			n, err := NonceFromBytes(data)
			if err != nil {
				return DestOpts{}, fmt.Errorf("destination options: nonce option at offset %d: %w", off, err)
			}
			if err := nonceMayFollow(d.Others); err != nil {
				return DestOpts{}, fmt.Errorf("destination options: nonce option at offset %d: %w", off, err)
			}
			d.Nonce, d.HasNonce, d.NonceOffset = n, true, off
		default:
			d.Others = append(d.Others, t)
		}
		opts, off = opts[2+l:], off+2+l
	}
	return d, nil
}

// nonceMayFollow checks the options seen before the nonce: RFC 6744 wants
// the nonce first, except that a CALIPSO option may precede it.
func nonceMayFollow(before []uint8) error {
	for _, t := range before {
		if t != optCALIPSO {
			return fmt.Errorf("preceded by option 0x%02x; RFC 6744 allows only CALIPSO before the nonce", t)
		}
	}
	return nil
}

// LocallyVerifiedNonce returns the nonce this host's ingress program checked and marked
// (exactly one VerifiedNonceOptionType option of 4 or 12 bytes). A header that is malformed,
// still holds an unchecked nonce option, or holds no or two marked ones is an error: a Locator
// Update behind it was not checked by the datapath.
func LocallyVerifiedNonce(dstopts []byte) (Nonce, error) {
	d, err := ParseDestOpts(dstopts)
	if err != nil {
		return Nonce{}, err
	}
	if d.HasNonce {
		return Nonce{}, fmt.Errorf("destination options: nonce option 0x%02x not checked by the datapath", NonceOptionType)
	}
	var found Nonce
	for opts, off := dstopts[2:d.Length], 2; len(opts) > 0; {
		if opts[0] == optPad1 {
			opts, off = opts[1:], off+1
			continue
		}
		l := int(opts[1]) // ParseDestOpts checked every option's bounds
		if opts[0] == VerifiedNonceOptionType {
			if !found.IsZero() {
				return Nonce{}, fmt.Errorf("destination options: second verified-nonce option at offset %d", off)
			}
			if found, err = NonceFromBytes(opts[2 : 2+l]); err != nil {
				return Nonce{}, fmt.Errorf("destination options: verified-nonce option at offset %d: %w", off, err)
			}
		}
		opts, off = opts[2+l:], off+2+l
	}
	if found.IsZero() {
		return Nonce{}, fmt.Errorf("destination options: no verified nonce")
	}
	return found, nil
}
