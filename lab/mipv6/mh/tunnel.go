package mh

import (
	"net/netip"

	"ilnp/internal/wire"
)

// AppendTunnel appends inner (a whole IPv6 packet) inside an outer IPv6 header from src to
// dst, Next Header 41: the home agent <-> mobile node tunnel of RFC 6275 s.10.4.1 and s.11.3.1,
// which is a plain RFC 2473 tunnel without a Tunnel Encapsulation Limit option. The outer
// header copies the inner traffic class and flow label (RFC 2473 s.5.1 leaves it to
// configuration; copying keeps DSCP and ECN visible on the path).
func AppendTunnel(b []byte, src, dst netip.Addr, inner []byte) ([]byte, error) {
	if !routableUnicast(src) || !routableUnicast(dst) {
		return nil, errAt("marshal tunnel", -1, ErrBadAddress, "%v -> %v", src, dst)
	}
	in, err := wire.ParseIPv6Header(inner)
	if err != nil {
		return nil, errAt("marshal tunnel", -1, ErrInvalid, "inner packet: %v", err)
	}
	if len(inner) > 0xffff {
		return nil, errAt("marshal tunnel", -1, ErrLength, "inner packet %d bytes", len(inner))
	}
	h := wire.IPv6Header{TrafficClass: in.TrafficClass, FlowLabel: in.FlowLabel, PayloadLen: uint16(len(inner)),
		NextHeader: ProtoIPv6, HopLimit: 64, Src: src, Dst: dst}
	return append(h.Append(b), inner...), nil
}

// ParseTunnel splits an IPv6-in-IPv6 packet into its outer envelope and the inner packet,
// checking both IPv6 headers' lengths.
func ParseTunnel(b []byte) (outer wire.IPv6Header, inner []byte, err error) {
	outer, err = wire.ParseIPv6Header(b)
	if err != nil {
		return wire.IPv6Header{}, nil, errAt("tunnel", 0, ErrTruncated, "%v", err)
	}
	if outer.NextHeader != ProtoIPv6 {
		return wire.IPv6Header{}, nil, errAt("tunnel", 6, ErrHeader, "next header %d, not IPv6-in-IPv6", outer.NextHeader)
	}
	if want := wire.IPv6HeaderLen + int(outer.PayloadLen); want != len(b) {
		cause := ErrLength
		if want > len(b) {
			cause = ErrTruncated
		}
		return wire.IPv6Header{}, nil, errAt("tunnel", 4, cause, "payload length %d, %d bytes present", outer.PayloadLen, len(b)-wire.IPv6HeaderLen)
	}
	inner = b[wire.IPv6HeaderLen:]
	ih, err := wire.ParseIPv6Header(inner)
	if err != nil {
		return wire.IPv6Header{}, nil, errAt("tunnel inner header", wire.IPv6HeaderLen, ErrTruncated, "%v", err)
	}
	if wire.IPv6HeaderLen+int(ih.PayloadLen) != len(inner) {
		return wire.IPv6Header{}, nil, errAt("tunnel inner header", wire.IPv6HeaderLen+4, ErrLength,
			"inner payload length %d, %d bytes present", ih.PayloadLen, len(inner)-wire.IPv6HeaderLen)
	}
	return outer, inner, nil
}
