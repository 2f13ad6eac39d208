package mh

import (
	"encoding/binary"
	"net/netip"
)

// OptionType is a mobility option type (RFC 6275 s.6.2).
type OptionType uint8

// Mobility option types.
const (
	OptPad1          OptionType = 0
	OptPadN          OptionType = 1
	OptRefreshAdvice OptionType = 2
	OptAltCareOf     OptionType = 3
	OptNonceIndices  OptionType = 4
	OptAuthData      OptionType = 5
)

// AuthenticatorLen is the size of the Binding Authorization Data authenticator: the first 96
// bits of an HMAC-SHA1 (RFC 6275 s.5.2.6).
const AuthenticatorLen = 12

// Option is one mobility option other than padding: RefreshAdvice, AltCareOf, NonceIndices,
// AuthData or UnknownOption. Encoders add padding themselves; parsers drop it.
type Option interface {
	OptionType() OptionType
}

// RefreshAdvice is the Binding Refresh Advice option (s.6.2.4): Interval in 4-second units.
type RefreshAdvice struct{ Interval uint16 }

// AltCareOf is the Alternate Care-of Address option (s.6.2.5).
type AltCareOf struct{ Addr netip.Addr }

// NonceIndices is the Nonce Indices option (s.6.2.6).
type NonceIndices struct{ Home, CareOf uint16 }

// AuthData is the Binding Authorization Data option (s.6.2.7).
type AuthData struct{ Authenticator [AuthenticatorLen]byte }

// UnknownOption keeps an option this package does not interpret; receivers skip it (RFC 6275
// s.6.2.1).
type UnknownOption struct {
	Type OptionType
	Data []byte
}

func (RefreshAdvice) OptionType() OptionType   { return OptRefreshAdvice }
func (AltCareOf) OptionType() OptionType       { return OptAltCareOf }
func (NonceIndices) OptionType() OptionType    { return OptNonceIndices }
func (AuthData) OptionType() OptionType        { return OptAuthData }
func (o UnknownOption) OptionType() OptionType { return o.Type }

// alignment returns x, y of the option's xn+y alignment requirement (RFC 6275 s.6.2.x),
// relative to the start of the Mobility Header.
func alignment(t OptionType) (x, y int) {
	switch t {
	case OptRefreshAdvice, OptNonceIndices:
		return 2, 0
	case OptAltCareOf:
		return 8, 6
	case OptAuthData:
		return 8, 2
	}
	return 1, 0
}

// dataLen is the fixed data length of the known options.
func dataLen(t OptionType) (int, bool) {
	switch t {
	case OptRefreshAdvice:
		return 2, true
	case OptAltCareOf:
		return 16, true
	case OptNonceIndices:
		return 4, true
	case OptAuthData:
		return AuthenticatorLen, true
	}
	return 0, false
}

// appendPadding appends n bytes of Pad1/PadN.
func appendPadding(b []byte, n int) []byte {
	switch {
	case n == 1:
		return append(b, byte(OptPad1))
	case n >= 2:
		b = append(b, byte(OptPadN), byte(n-2))
		return append(b, make([]byte, n-2)...)
	}
	return b
}

// Find returns the first option of type T in opts.
func Find[T Option](opts []Option) (T, bool) {
	for _, o := range opts {
		if v, ok := o.(T); ok {
			return v, true
		}
	}
	var zero T
	return zero, false
}

func appendOptions(b []byte, opts []Option) ([]byte, error) {
	for i, o := range opts {
		if o == nil {
			return nil, errAt("marshal option", -1, ErrInvalid, "option %d is nil", i)
		}
		t := o.OptionType()
		x, y := alignment(t)
		b = appendPadding(b, ((y-len(b))%x+x)%x)
		switch v := o.(type) {
		case RefreshAdvice:
			b = append(b, byte(t), 2)
			b = binary.BigEndian.AppendUint16(b, v.Interval)
		case AltCareOf:
			if !routableUnicast(v.Addr) {
				return nil, errAt("marshal alternate care-of address", -1, ErrBadAddress, "%v", v.Addr)
			}
			a := v.Addr.As16()
			b = append(append(b, byte(t), 16), a[:]...)
		case NonceIndices:
			b = append(b, byte(t), 4)
			b = binary.BigEndian.AppendUint16(b, v.Home)
			b = binary.BigEndian.AppendUint16(b, v.CareOf)
		case AuthData:
			if i != len(opts)-1 {
				return nil, errAt("marshal binding authorization data", -1, ErrAuthNotLast,
					"option %d of %d", i+1, len(opts))
			}
			b = append(append(b, byte(t), AuthenticatorLen), v.Authenticator[:]...)
		case UnknownOption:
			if t == OptPad1 || t == OptPadN || len(v.Data) > 255 {
				return nil, errAt("marshal option", -1, ErrInvalid, "unknown option type %d with %d bytes", t, len(v.Data))
			}
			if _, known := dataLen(t); known {
				return nil, errAt("marshal option", -1, ErrInvalid, "type %d has its own Go type", t)
			}
			b = append(append(b, byte(t), byte(len(v.Data))), v.Data...)
		default:
			return nil, errAt("marshal option", -1, ErrInvalid, "option type %T", o)
		}
	}
	return appendPadding(b, (8-len(b)%8)%8), nil
}

// parseOptions parses the options in mh[start:], checking offsets against the start of mh.
func parseOptions(mh []byte, start int) ([]Option, error) {
	var opts []Option
	for off := start; off < len(mh); {
		t := OptionType(mh[off])
		if t == OptPad1 {
			off++
			continue
		}
		if off+2 > len(mh) {
			return nil, errAt("mobility option", off, ErrTruncated, "type %d without a length", t)
		}
		n := int(mh[off+1])
		end := off + 2 + n
		if end > len(mh) {
			return nil, errAt("mobility option", off, ErrTruncated, "type %d length %d runs past the header", t, n)
		}
		data := mh[off+2 : end]
		if want, known := dataLen(t); known {
			if n != want {
				return nil, errAt("mobility option", off+1, ErrLength, "type %d length %d, want %d", t, n, want)
			}
			if x, y := alignment(t); off%x != y {
				return nil, errAt("mobility option", off, ErrMisaligned, "type %d at offset %d, want %dn+%d", t, off, x, y)
			}
		}
		switch t {
		case OptPadN:
		case OptRefreshAdvice:
			opts = append(opts, RefreshAdvice{Interval: binary.BigEndian.Uint16(data)})
		case OptAltCareOf:
			a := netip.AddrFrom16([16]byte(data))
			if !routableUnicast(a) {
				return nil, errAt("alternate care-of address", off+2, ErrBadAddress, "%v", a)
			}
			opts = append(opts, AltCareOf{Addr: a})
		case OptNonceIndices:
			opts = append(opts, NonceIndices{Home: binary.BigEndian.Uint16(data), CareOf: binary.BigEndian.Uint16(data[2:])})
		case OptAuthData:
			if end != len(mh) {
				return nil, errAt("binding authorization data", off, ErrAuthNotLast, "%d bytes follow it", len(mh)-end)
			}
			opts = append(opts, AuthData{Authenticator: [AuthenticatorLen]byte(data)})
		default:
			opts = append(opts, UnknownOption{Type: t, Data: append([]byte(nil), data...)})
		}
		off = end
	}
	return opts, nil
}

// MarshalAuthorized encodes m, whose last option must be AuthData, filling the authenticator
// with auth(data), where data is the Mobility Header with its checksum zero and without the
// authenticator (RFC 6275 s.5.2.6 "MH Data"); then sets the checksum for src and dst.
func MarshalAuthorized(m Message, src, dst netip.Addr, auth func(mhData []byte) [AuthenticatorLen]byte) ([]byte, error) {
	opts := m.MobilityOptions()
	if len(opts) == 0 || opts[len(opts)-1].OptionType() != OptAuthData {
		return nil, errAt("marshal "+m.Type().String(), -1, ErrAuthNotLast, "no binding authorization data option last")
	}
	b, err := marshalZeroChecksum(m)
	if err != nil {
		return nil, err
	}
	a := auth(b[:len(b)-AuthenticatorLen])
	copy(b[len(b)-AuthenticatorLen:], a[:])
	setChecksum(b, src, dst)
	return b, nil
}

// AuthorizedData splits a Mobility Header that ends with a Binding Authorization Data option
// into the MAC input (checksum zeroed, authenticator excluded: RFC 6275 s.5.2.6) and the
// authenticator. ok is false when b does not end with that option.
func AuthorizedData(b []byte) (data []byte, auth [AuthenticatorLen]byte, ok bool) {
	m, err := ParseUnchecked(b)
	if err != nil {
		return nil, auth, false
	}
	a, found := Find[AuthData](m.MobilityOptions())
	if !found {
		return nil, auth, false
	}
	data = append([]byte(nil), b[:len(b)-AuthenticatorLen]...)
	data[4], data[5] = 0, 0
	return data, a.Authenticator, true
}

// routableUnicast reports whether a may serve as a home or care-of address: IPv6 (not
// IPv4-mapped), not unspecified, loopback, multicast or link-local (RFC 6275 s.6.3, s.6.4).
func routableUnicast(a netip.Addr) bool {
	return a.Is6() && !a.Is4In6() && !a.IsUnspecified() && !a.IsLoopback() && !a.IsMulticast() &&
		!a.IsLinkLocalUnicast()
}
