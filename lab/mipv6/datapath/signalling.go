package datapath

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"

	"golang.org/x/sys/unix"

	"ilnp/internal/bpfring"
)

// Signal is one Mobility Header packet for this node as the datapath saw it on ingress: the
// IPv6 packet from its fixed header on, after the HA's tunnel was removed (a Home Test at the
// MN) but with any Home Address option (a Binding Update) or type 2 Routing header (a Binding
// Acknowledgement) still in place, ready for mh.ParseMessage.
type Signal struct {
	// Ns is bpf_ktime_get_ns (CLOCK_MONOTONIC) when the packet arrived.
	Ns      uint64
	Ifindex int
	Packet  []byte
}

// signalHeader is the fixed part of struct mip6_signal (bpf/lib/maps.h).
const signalHeader = 8 + 4 + 4

func decodeSignal(b []byte) (Signal, error) {
	if len(b) < signalHeader {
		return Signal{}, fmt.Errorf("signal record of %d bytes", len(b))
	}
	le := binary.LittleEndian
	n := int(le.Uint32(b[12:]))
	if n > len(b)-signalHeader {
		return Signal{}, fmt.Errorf("signal record says %d bytes, holds %d", n, len(b)-signalHeader)
	}
	return Signal{Ns: le.Uint64(b), Ifindex: int(le.Uint32(b[8:])),
		Packet: append([]byte(nil), b[signalHeader:signalHeader+n]...)}, nil
}

// SetSignallingTap turns the signalling tap on or off. On, every Mobility Header packet for
// this node (HA: addressed to the home agent address; MN and CN: any arriving) is handed to
// Signalling and dropped before the stack sees it: this kernel has no MIPv6 and would
// discard a Binding Update's Home Address option or a BAck's type 2 RH (ICMP Parameter
// Problem), and answers MH without an open raw socket with another ICMP error. Send MH with a
// raw IPv6 socket (IPPROTO_RAW, the header built with mh.AppendMessage): the MN's egress
// program tunnels a HoTI from the home address by itself.
func (d *Datapath) SetSignallingTap(on bool) error {
	return d.updateConfig("signalling tap", func(c *mip6BPFMip6Config) {
		c.Flags &^= flagSignallingTap
		if on {
			c.Flags |= flagSignallingTap
		}
	})
}

// Signalling streams what the tap catches until ctx ends or the Datapath is closed, then
// closes the channel. Only one reader may run at a time.
func (d *Datapath) Signalling(ctx context.Context) (<-chan Signal, error) {
	out, err := bpfring.Stream(ctx, &d.signalling, d.objs.Signalling, "mipv6 datapath signalling", func(b []byte) (Signal, bool) {
		s, err := decodeSignal(b)
		if err != nil {
			slog.Error("mipv6 datapath signalling", "err", err)
			return s, false
		}
		return s, true
	})
	switch {
	case errors.Is(err, bpfring.ErrBusy):
		return nil, errors.New("mipv6 datapath: signalling is already being read")
	case err != nil:
		return nil, fmt.Errorf("mipv6 datapath: signalling reader: %w", err)
	}
	return out, nil
}

// Sender sends whole IPv6 packets as the signalling builds them (mh.AppendMessage: header,
// type 2 RH or HAO, Mobility Header) through a raw socket with the header included, in the
// network namespace of the thread that called NewSender. The packets then pass the node's own
// egress program like any other: a HoTI from the home address goes through the reverse
// tunnel, a BU from the care-of address with its HAO leaves as it is.
type Sender struct{ fd int }

// NewSender opens the raw socket (IPPROTO_RAW: header included).
func NewSender() (*Sender, error) {
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
	if err != nil {
		return nil, fmt.Errorf("mipv6 datapath: raw IPv6 socket: %w", err)
	}
	return &Sender{fd: fd}, nil
}

// Send sends pkt, an IPv6 packet from its fixed header on, to its header's destination.
func (s *Sender) Send(pkt []byte) error {
	if len(pkt) < 40 || pkt[0]>>4 != 6 {
		return fmt.Errorf("mipv6 datapath: send: not an IPv6 packet (%d bytes)", len(pkt))
	}
	if want := 40 + int(binary.BigEndian.Uint16(pkt[4:])); want != len(pkt) {
		return fmt.Errorf("mipv6 datapath: send: payload length says %d bytes, packet has %d", want, len(pkt))
	}
	to := &unix.SockaddrInet6{Addr: [16]byte(pkt[24:40])}
	if err := unix.Sendto(s.fd, pkt, 0, to); err != nil {
		return fmt.Errorf("mipv6 datapath: send to %v: %w", netip.AddrFrom16(to.Addr), err)
	}
	return nil
}

// SendOn sends pkt out of interface ifindex: for link-scoped destinations (the solicited-node
// group of a DAD Neighbor Solicitation), which have no route of their own.
func (s *Sender) SendOn(pkt []byte, ifindex int) error {
	if len(pkt) < 40 || pkt[0]>>4 != 6 || 40+int(binary.BigEndian.Uint16(pkt[4:])) != len(pkt) {
		return fmt.Errorf("mipv6 datapath: send: not a whole IPv6 packet (%d bytes)", len(pkt))
	}
	if ifindex <= 0 {
		return fmt.Errorf("mipv6 datapath: send: interface index %d", ifindex)
	}
	to := &unix.SockaddrInet6{Addr: [16]byte(pkt[24:40]), ZoneId: uint32(ifindex)}
	if err := unix.Sendto(s.fd, pkt, 0, to); err != nil {
		return fmt.Errorf("mipv6 datapath: send to %v on interface %d: %w", netip.AddrFrom16(to.Addr), ifindex, err)
	}
	return nil
}

// Close closes the socket.
func (s *Sender) Close() error { return unix.Close(s.fd) }
