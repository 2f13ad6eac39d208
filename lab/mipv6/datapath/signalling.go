package datapath

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"

	"github.com/cilium/ebpf/ringbuf"
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
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.reader != nil {
		return nil, errors.New("mipv6 datapath: signalling is already being read")
	}
	rd, err := ringbuf.NewReader(d.objs.Signalling)
	if err != nil {
		return nil, fmt.Errorf("mipv6 datapath: signalling reader: %w", err)
	}
	d.reader = rd
	out := make(chan Signal, 64)
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-done:
		}
		rd.Close()
	}()
	go func() {
		defer func() {
			d.mu.Lock()
			if d.reader == rd {
				d.reader = nil
			}
			d.mu.Unlock()
			close(done)
			close(out)
		}()
		for {
			rec, err := rd.Read()
			if err != nil {
				if !errors.Is(err, ringbuf.ErrClosed) {
					slog.Error("mipv6 datapath signalling", "err", err)
				}
				return
			}
			s, err := decodeSignal(rec.RawSample)
			if err != nil {
				slog.Error("mipv6 datapath signalling", "err", err)
				continue
			}
			select {
			case out <- s:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}
